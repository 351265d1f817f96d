//! Sessions and their scope: the objects one agent session may touch.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

/// A session id, chosen by the host (one MCP connection, one chat, one job).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// A session id.
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// A fresh random session id (`ses_…`).
    pub fn random() -> Self {
        Self(format!("ses_{}", uuid::Uuid::now_v7().simple()))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One agent session: its id and the objects it may touch, per scope kind.
///
/// Scope is deny-by-default: a call naming an object of a kind the session has no entry for
/// is refused with `out_of_scope`.
///
/// ```
/// use sallyport_vocab::session::Session;
/// let session = Session::new("chat-42")
///     .allow("project", ["proj_1", "proj_2"])
///     .allow("host", ["web1"]);
/// assert!(session.permits("project", "proj_1"));
/// assert!(!session.permits("project", "proj_999"));
/// assert!(!session.permits("workspace", "ws_1"));
/// ```
///
/// The host may attach attributes for its policy ([`crate::policy`]): who the session acts
/// for, a team, a tier. They are the host's, never the agent's.
///
/// ```
/// use sallyport_vocab::session::Session;
/// let session = Session::new("chat-42").with_attribute("team", "billing");
/// assert_eq!(session.attribute("team"), Some("billing"));
/// ```
///
/// A session may name its **subject**, the end user the agent acts for
/// ([`Session::for_subject`]): a credential held for each user (an OAuth credential configured
/// `per_subject`) then resolves to that user's grant, never anyone else's. Static credentials
/// ignore it.
///
/// ```
/// use sallyport_vocab::session::Session;
/// let session = Session::new("chat-42").for_subject("alice@example.com");
/// assert_eq!(session.subject(), Some("alice@example.com"));
/// assert_eq!(Session::new("chat-43").subject(), None);
/// ```
///
/// A session serializes (id, requester, subject, scope and attributes) so that a call parked for a later approval
/// can be checked against the scope it was made under when it resumes in another process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    requester: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    subject: Option<String>,
    #[serde(default)]
    scopes: BTreeMap<String, ScopeSet>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    attributes: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ScopeSet {
    Any,
    Only(BTreeSet<String>),
}

impl Session {
    /// A session with an empty scope.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: SessionId::new(id),
            requester: None,
            subject: None,
            scopes: BTreeMap::new(),
            attributes: BTreeMap::new(),
        }
    }

    /// Sets attribute `name` to `value` for the host's policy (a team, a tier, a role). Set
    /// by the host, never by the agent; a policy reads them (Cedar: as tags of the
    /// `Session` principal).
    #[must_use]
    pub fn with_attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.insert(name.into(), value.into());
        self
    }

    /// The value of attribute `name`, when the host set one.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes.get(name).map(String::as_str)
    }

    /// Every attribute the host set, by name.
    pub fn attributes(&self) -> &BTreeMap<String, String> {
        &self.attributes
    }

    /// Names who the session acts for (a user, a service account), as an approver is shown
    /// it. Free text chosen by the host, never by the agent.
    #[must_use]
    pub fn requested_by(mut self, requester: impl Into<String>) -> Self {
        self.requester = Some(requester.into());
        self
    }

    /// Who the session acts for, when the host said.
    pub fn requester(&self) -> Option<&str> {
        self.requester.as_deref()
    }

    /// Names the end user the agent acts for in this session: an OAuth credential configured
    /// for each subject (`per_subject`) resolves to this user's grant, and a call of one is
    /// refused with `credential_unavailable` while the user has not connected the account.
    /// Chosen by the host (from its own login), never by the agent; none by default.
    /// Static credentials (bearer, basic, API key, SSH) are used as before whatever it is.
    #[must_use]
    pub fn for_subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// The end user the session acts for, when the host named one.
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }

    /// Allows these objects of scope `kind`.
    #[must_use]
    pub fn allow<I, S>(mut self, kind: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let entry = self
            .scopes
            .entry(kind.into())
            .or_insert_with(|| ScopeSet::Only(BTreeSet::new()));
        if let ScopeSet::Only(set) = entry {
            set.extend(values.into_iter().map(Into::into));
        }
        self
    }

    /// Allows every object of scope `kind`. Use for kinds that are not a tenancy boundary.
    #[must_use]
    pub fn allow_any(mut self, kind: impl Into<String>) -> Self {
        self.scopes.insert(kind.into(), ScopeSet::Any);
        self
    }

    /// The session id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Whether the session may touch object `value` of scope `kind`.
    pub fn permits(&self, kind: &str, value: &str) -> bool {
        match self.scopes.get(kind) {
            Some(ScopeSet::Any) => true,
            Some(ScopeSet::Only(set)) => set.contains(value),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_without_a_subject_serializes_as_before_and_a_subject_survives_a_round_trip() {
        let plain = Session::new("chat-1").allow("project", ["p1"]);
        let json = serde_json::to_string(&plain).expect("json");
        assert_eq!(
            json,
            r#"{"id":"chat-1","scopes":{"project":{"only":["p1"]}}}"#
        );
        // A call parked for approval resumes with the user it was made for.
        let parked = plain.for_subject("alice");
        let json = serde_json::to_string(&parked).expect("json");
        assert!(json.contains(r#""subject":"alice""#), "{json}");
        let back: Session = serde_json::from_str(&json).expect("parse");
        assert_eq!(back.subject(), Some("alice"));
        assert_eq!(back, parked);
    }
}
