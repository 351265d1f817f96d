//! Session consent grants, bound to the action's definition hash.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Remembers `session` consent per (session, action, definition hash) until expiry. A changed
/// definition has another hash, so drift revokes the grant.
#[derive(Debug, Default)]
pub struct SessionGrants {
    grants: Mutex<HashMap<(String, String, String), Instant>>,
}

impl SessionGrants {
    /// No grants.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a grant for `ttl`.
    pub fn grant(&self, session: &str, action: &str, definition_hash: &str, ttl: Duration) {
        let expires = Instant::now() + ttl;
        let mut grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        grants.retain(|_, exp| *exp > Instant::now());
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
            .is_some_and(|exp| *exp > Instant::now())
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
}
