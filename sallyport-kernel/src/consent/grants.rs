//! Session consent grants, bound to the action's definition hash.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Remembers `session` consent per (session, action, definition hash) until expiry. A changed
/// definition has another hash, so drift revokes the grant.
#[derive(Debug, Default)]
pub struct SessionGrants {
    /// `None`: a grant whose ttl reaches past what `Instant` can represent; it lasts until the
    /// session's grants are revoked.
    grants: Mutex<HashMap<(String, String, String), Option<Instant>>>,
}

fn live(expires: Option<Instant>, now: Instant) -> bool {
    expires.is_none_or(|exp| exp > now)
}

impl SessionGrants {
    /// No grants.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a grant for `ttl`. A `ttl` too long to represent (`Duration::MAX`) lasts until
    /// [`SessionGrants::revoke_session`].
    pub fn grant(&self, session: &str, action: &str, definition_hash: &str, ttl: Duration) {
        let now = Instant::now();
        let expires = now.checked_add(ttl);
        let mut grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        grants.retain(|_, exp| live(*exp, now));
        grants.insert(
            (
                session.to_owned(),
                action.to_owned(),
                definition_hash.to_owned(),
            ),
            expires,
        );
    }

    /// Whether a live grant exists for exactly this definition.
    pub fn has(&self, session: &str, action: &str, definition_hash: &str) -> bool {
        let grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        grants
            .get(&(
                session.to_owned(),
                action.to_owned(),
                definition_hash.to_owned(),
            ))
            .is_some_and(|exp| live(*exp, Instant::now()))
    }

    /// Revokes every grant of a session.
    pub fn revoke_session(&self, session: &str) {
        let mut grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        grants.retain(|(s, _, _), _| s != session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_is_bound_to_the_definition_hash_and_expires() {
        let g = SessionGrants::new();
        g.grant("s1", "act", "hash1", Duration::from_secs(60));
        assert!(g.has("s1", "act", "hash1"));
        assert!(!g.has("s1", "act", "hash2"));
        assert!(!g.has("s2", "act", "hash1"));
        g.grant("s1", "short", "h", Duration::ZERO);
        assert!(!g.has("s1", "short", "h"));
        g.revoke_session("s1");
        assert!(!g.has("s1", "act", "hash1"));
    }

    #[test]
    fn a_grant_for_duration_max_lasts_until_the_session_is_revoked_without_panicking() {
        let g = SessionGrants::new();
        g.grant("s1", "act", "hash1", Duration::MAX);
        assert!(g.has("s1", "act", "hash1"));
        // A later grant prunes expired entries; the unbounded one stays.
        g.grant("s1", "other", "hash2", Duration::ZERO);
        assert!(g.has("s1", "act", "hash1"));
        assert!(!g.has("s1", "other", "hash2"));
        g.revoke_session("s1");
        assert!(!g.has("s1", "act", "hash1"));
    }
}
