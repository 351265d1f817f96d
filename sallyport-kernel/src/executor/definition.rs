//! Stage 5, definition: the live definition matches the approved baseline, else
//! `definition_drift` or `review_required`.

use std::fmt;

use super::authorize::Authorized;
use crate::drift::DefinitionGuard;
use crate::outcome::Refusal;

/// A call whose action definition may be called. Only this stage's `check` makes one.
pub(crate) struct Approved {
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
    pub(crate) fn authorized(&self) -> &Authorized {
        &self.authorized
    }

    pub(super) fn authorized_mut(&mut self) -> &mut Authorized {
        &mut self.authorized
    }
}

/// Asks the definition guard, when there is one; without one every action is callable.
/// sallyport's built-in `check_approval` is not the host's to baseline: it reads the
/// journal only, and its definition changes with sallyport's version.
pub(super) fn check(
    guard: Option<&dyn DefinitionGuard>,
    authorized: Authorized,
) -> Result<Approved, Refusal> {
    let entry = authorized.validated().entry();
    let builtin = entry.spec().target.channel_name() == Some(crate::approval::check::CHANNEL);
    if let Some(guard) = guard
        && !builtin
    {
        guard.check(&entry.spec().name, entry.definition_hash())?;
    }
    Ok(Approved { authorized })
}

/// What the definition check found, in words for an approver.
pub(super) fn status(guard: Option<&dyn DefinitionGuard>) -> &'static str {
    if guard.is_some() {
        "matches the approved baseline"
    } else {
        "no definition guard configured (no baseline)"
    }
}
