//! Consent per MCP connection: the host's provider first; MCP elicitation only where the host
//! enables it; refusal when no one can be asked.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{Peer, RoleServer};
use sallyport_core::action::ConsentRule;
use sallyport_core::consent::{ConsentDecision, ConsentProvider, ConsentRequest};

/// Whether, and when, an MCP client's own user may answer consent through
/// `elicitation/create`.
///
/// Any client can declare the `elicitation` capability, including the agent's own harness, so
/// an elicitation answer is only as trustworthy as the client that gives it. The host decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Elicitation {
    /// Never (the default): only the host's provider answers.
    #[default]
    Disabled,
    /// When the host's provider cannot ask anyone: there is none, or it answers
    /// [`ConsentDecision::Unavailable`] (a `TerminalConsent` with no terminal).
    Fallback,
    /// First, for connections whose client declared the capability; the host's provider for
    /// the others. Only for a host that trusts every client that can connect to it (the
    /// user's own IDE over stdio).
    Preferred,
}

/// A [`ConsentProvider`] that routes each request to the MCP connection of its session.
///
/// One MCP connection is one sallyport session. By default the host's provider (if any)
/// answers every request, and a client that declares `elicitation` is never asked: a client
/// cannot approve its own calls. With [`Elicitation::Fallback`] or
/// [`Elicitation::Preferred`] the host lets a client that declared the capability show the
/// request to its user through `elicitation/create` (`accept` approves, `decline` and
/// `cancel` deny). With no one to ask, the answer is [`ConsentDecision::Unavailable`] and the
/// executor refuses the call with `consent_unavailable`: consent fails closed.
///
/// Give the executor the router with
/// [`ExecutorBuilder::consent_arc`](sallyport_core::executor::ExecutorBuilder::consent_arc)
/// and the same router to [`McpServer::new`](crate::McpServer::new).
///
/// ```
/// use std::sync::Arc;
/// use sallyport_core::consent::TerminalConsent;
/// use sallyport_mcp::{ConsentRouter, Elicitation};
/// // Ask on this process's terminal; when there is none, let the client's user answer.
/// let router = ConsentRouter::builder()
///     .provider(Arc::new(TerminalConsent::new()))
///     .elicitation(Elicitation::Fallback)
///     .build();
/// # let _ = router;
/// ```
pub struct ConsentRouter {
    peers: RwLock<HashMap<String, Peer<RoleServer>>>,
    provider: Option<Arc<dyn ConsentProvider>>,
    elicitation: Elicitation,
    session_ttl: Duration,
}

impl std::fmt::Debug for ConsentRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsentRouter")
            .field("connections", &self.connections())
            .field("provider", &self.provider.is_some())
            .field("elicitation", &self.elicitation)
            .finish_non_exhaustive()
    }
}

/// Builds a [`ConsentRouter`].
#[derive(Default)]
#[must_use]
pub struct ConsentRouterBuilder {
    provider: Option<Arc<dyn ConsentProvider>>,
    elicitation: Elicitation,
    session_ttl: Option<Duration>,
}

impl std::fmt::Debug for ConsentRouterBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsentRouterBuilder")
            .field("provider", &self.provider.is_some())
            .field("elicitation", &self.elicitation)
            .finish_non_exhaustive()
    }
}

impl ConsentRouterBuilder {
    /// The host's own provider, asked first unless elicitation is [`Elicitation::Preferred`].
    pub fn provider(mut self, provider: Arc<dyn ConsentProvider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Whether and when a client's user answers through elicitation (default
    /// [`Elicitation::Disabled`]).
    pub fn elicitation(mut self, elicitation: Elicitation) -> Self {
        self.elicitation = elicitation;
        self
    }

    /// How long an accepted elicitation for a `session` action lasts (default an hour).
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = Some(ttl);
        self
    }

    /// The router.
    pub fn build(self) -> Arc<ConsentRouter> {
        Arc::new(ConsentRouter {
            peers: RwLock::new(HashMap::new()),
            provider: self.provider,
            elicitation: self.elicitation,
            session_ttl: self.session_ttl.unwrap_or(Duration::from_secs(3600)),
        })
    }
}

impl ConsentRouter {
    /// A router with no provider and no elicitation: every call that needs consent is
    /// refused with `consent_unavailable`.
    pub fn new() -> Arc<Self> {
        Self::builder().build()
    }

    /// A router that asks the host's `provider` for every session; clients are never asked.
    pub fn with_provider(provider: Arc<dyn ConsentProvider>) -> Arc<Self> {
        Self::builder().provider(provider).build()
    }

    /// A builder, to enable elicitation.
    pub fn builder() -> ConsentRouterBuilder {
        ConsentRouterBuilder::default()
    }

    /// How many connections currently may answer consent through elicitation (always 0 with
    /// [`Elicitation::Disabled`]).
    pub fn connections(&self) -> usize {
        self.peers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Remembers a connection whose client declared elicitation, when the host enabled it.
    pub(crate) fn register(&self, session_id: &str, peer: Peer<RoleServer>) {
        if self.elicitation == Elicitation::Disabled {
            return;
        }
        self.peers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session_id.to_owned(), peer);
    }

    pub(crate) fn unregister(&self, session_id: &str) {
        self.peers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(session_id);
    }

    fn peer(&self, session_id: &str) -> Option<Peer<RoleServer>> {
        self.peers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(session_id)
            .cloned()
    }
}

/// The text the client's user is shown: the request's display form (every field the agent
/// wrote escaped, none cut), never its raw fields.
fn message_of(request: &ConsentRequest) -> String {
    let d = &request.display;
    let mut text = format!(
        "An agent asks to run `{}` ({}, {}).\n{}\nRequest: {}\n",
        d.action,
        request.effect,
        request.externality.as_str(),
        d.summary,
        d.request
    );
    for object in &d.objects {
        text.push_str(&format!("Object: {} {}\n", object.kind, object.value));
    }
    if let Some(note) = &d.note {
        text.push_str(&format!("Agent's reason (unverified): {note}\n"));
    }
    text.push_str(match request.rule {
        ConsentRule::Session => {
            "Accept approves this action for the rest of this session; decline denies it."
        }
        _ => "Accept approves this one call; decline denies it.",
    });
    text
}

#[async_trait]
impl ConsentProvider for ConsentRouter {
    fn channel(&self) -> &str {
        "mcp_elicitation"
    }

    async fn ask(&self, request: &ConsentRequest) -> ConsentDecision {
        let peer = match self.elicitation {
            Elicitation::Disabled => None,
            _ => self.peer(&request.session_id),
        };
        match (self.elicitation, peer) {
            (Elicitation::Preferred, Some(peer)) => self.elicit(&peer, request).await,
            (Elicitation::Fallback, Some(peer)) => match self.ask_provider(request).await {
                ConsentDecision::Unavailable => self.elicit(&peer, request).await,
                decision => decision,
            },
            (_, _) => self.ask_provider(request).await,
        }
    }
}

impl ConsentRouter {
    async fn ask_provider(&self, request: &ConsentRequest) -> ConsentDecision {
        match &self.provider {
            Some(provider) => provider.ask(request).await,
            None => ConsentDecision::Unavailable,
        }
    }

    async fn elicit(&self, peer: &Peer<RoleServer>, request: &ConsentRequest) -> ConsentDecision {
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message_of(request),
            requested_schema: ElicitationSchema::builder().build_unchecked(),
        };
        match peer.create_elicitation(params).await {
            Ok(result) => match result.action {
                ElicitationAction::Accept => match request.rule {
                    ConsentRule::Session => ConsentDecision::ApproveForSession {
                        ttl: self.session_ttl,
                    },
                    _ => ConsentDecision::Approve,
                },
                ElicitationAction::Decline => ConsentDecision::Deny {
                    reason: Some("the user declined".to_owned()),
                },
                ElicitationAction::Cancel => ConsentDecision::Deny {
                    reason: Some("the user dismissed the request".to_owned()),
                },
                _ => ConsentDecision::Deny {
                    reason: Some("the user did not accept".to_owned()),
                },
            },
            Err(error) => {
                tracing::warn!(%error, action = %request.action, "elicitation failed");
                ConsentDecision::Unavailable
            }
        }
    }
}
