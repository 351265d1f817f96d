//! Stage 5, definition: the live definition matches the approved baseline, else
//! `definition_drift` or `review_required`.

use std::fmt;

use super::authorize::Authorized;
use super::call::Call;
use crate::drift::DefinitionGuard;
use crate::outcome::Refusal;

/// A call whose action definition may be called. Only this stage's `check` makes one.
pub(crate) struct Approved {
    call: Call,
}

impl fmt::Debug for Approved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Approved")
            .field("call", &self.call)
            .finish()
    }
}

impl Approved {
    /// The call as stages 1–5 established it.
    pub(crate) fn call(&self) -> &Call {
        &self.call
    }

    /// The call alone, for stage 6 to bind its credential.
    pub(super) fn into_call(self) -> Call {
        self.call
    }
}

/// Asks the definition guard, when there is one; without one every action is callable.
/// sallyport's built-in `check_approval` is not the host's to baseline: it reads the
/// journal only, and its definition changes with sallyport's version.
pub(super) fn check(
    guard: Option<&dyn DefinitionGuard>,
    authorized: Authorized,
) -> Result<Approved, Refusal> {
    let call = authorized.call();
    let builtin = call.spec().target.channel_name() == Some(crate::approval::check::CHANNEL);
    if let Some(guard) = guard
        && !builtin
    {
        guard.check(&call.spec().name, call.definition_hash())?;
    }
    Ok(Approved {
        call: authorized.into_call(),
    })
}

/// What the definition check found, in words for an approver.
pub(super) fn status(guard: Option<&dyn DefinitionGuard>) -> &'static str {
    if guard.is_some() {
        "matches the approved baseline"
    } else {
        "no definition guard configured (no baseline)"
    }
}
