//! Stage 10, dispatch: the channel sends the prepared request (and resends it only as the
//! action's retry rule allows, with the same idempotency key), each send granted by the
//! vault and counted.

use std::fmt;
use std::sync::Arc;

use super::Inner;
use super::cancel::CallGuard;
use super::intent::Intended;
use crate::channel::{ChannelOutcome, Dispatch, DispatchContext};

/// A call the channel dispatched, with its raw outcome and the sends counted. Only
/// `dispatch` makes one.
pub(crate) struct Dispatched {
    intended: Intended,
    outcome: ChannelOutcome,
    sends: u32,
}

impl fmt::Debug for Dispatched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatched")
            .field("intended", &self.intended)
            .field("status", &self.outcome.status)
            .field("sends", &self.sends)
            .finish_non_exhaustive()
    }
}

impl Dispatched {
    pub(super) fn into_parts(self) -> (Intended, ChannelOutcome, u32) {
        (self.intended, self.outcome, self.sends)
    }
}

/// Sends. The guard learns the dispatch context first, so a call dropped mid-send is
/// recorded as `unknown`, never as "nothing sent".
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its by-value argument twice in its future; a block uses the capture in place"
)]
pub(super) fn dispatch(
    inner: &Inner,
    guard: &mut CallGuard,
    intended: Intended,
) -> impl Future<Output = Dispatched> {
    async move {
        let call = intended.call();
        let context = Arc::new(DispatchContext::new(
            intended.intent().attempt_id.clone(),
            intended.intent().session_id.clone(),
            Arc::clone(&inner.journal),
            intended.written(),
            inner.vault.clone(),
            call.resolved(),
            Arc::clone(call.scrubber()),
        ));
        guard.dispatching(Arc::clone(&context));
        let channel = call.channel();
        let send = channel.dispatch(Dispatch {
            spec: call.spec(),
            request: call.request(),
            attempt_id: &intended.intent().attempt_id,
            idempotency_key: intended.idempotency_key(),
            credential: call.credential(),
            context: &context,
        });
        let outcome = crate::executor::spans::dispatch(channel.name(), &context, send).await;
        let sends = context.sends();
        Dispatched {
            intended,
            outcome,
            sends,
        }
    }
}
