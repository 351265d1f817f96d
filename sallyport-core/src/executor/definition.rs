//! Stage 5, definition: the live definition matches the approved baseline, else
//! `definition_drift` or `review_required`.

use std::fmt;

use super::authorize::Authorized;
use crate::drift::DefinitionGuard;
use crate::outcome::Refusal;

/// A call whose action definition may be called. Only this stage's `check` makes one.
pub struct Approved {
    authorized: Authorized,
}

impl fmt::Debug for Approved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Approved")
            .field("authorized", &self.authorized)
            .finish()
    }
}

impl Approved {
    /// What stage 4 established.
    pub fn authorized(&self) -> &Authorized {
        &self.authorized
    }

    pub(super) fn authorized_mut(&mut self) -> &mut Authorized {
        &mut self.authorized
    }
}

/// Asks the definition guard, when there is one; without one every action is callable.
pub(super) fn check(
    guard: Option<&dyn DefinitionGuard>,
    authorized: Authorized,
) -> Result<Approved, Refusal> {
    if let Some(guard) = guard {
        let entry = authorized.validated().entry();
        guard.check(&entry.spec().name, entry.definition_hash())?;
    }
    Ok(Approved { authorized })
}
