//! The host's hooks ([`crate::hooks`]) where their stages are: the pre-dispatch hooks after
//! stage 8 (consent) and before stage 9 (intent), the post-result hooks at the end of stage
//! 12 (filter), after the executor's own filtering. Each run is bounded by its timeout and
//! guarded against a panic; each is noted on the call's record.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::consent::Consented;
use super::filter::{self, Filtered};
use super::record::CallRecord;
use crate::code::RefusalCode;
use crate::hooks::{
    DEFAULT_HOOK_TIMEOUT, HookNote, HookOutcome, HookSettings, HookStage, PostResultDecision,
    PostResultHook, PostResultRequest, PreDispatchDecision, PreDispatchHook, PreDispatchRequest,
};
use crate::outcome::{ActionResult, Origin, Refusal, Status};
use crate::scrub::Scrubber;
use crate::session::Session;
use sallyport_vocab::{MAX_ACTION_NAME, MAX_REASON};

/// One registered hook: its name, settings and the hook.
struct Registered<H: ?Sized> {
    name: String,
    settings: HookSettings,
    hook: Arc<H>,
}

/// The hooks an executor runs, in registration order.
pub(crate) struct Hooks {
    pre: Vec<Registered<dyn PreDispatchHook>>,
    post: Vec<Registered<dyn PostResultHook>>,
    timeout: Duration,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            pre: Vec::new(),
            post: Vec::new(),
            timeout: DEFAULT_HOOK_TIMEOUT,
        }
    }
}

impl Hooks {
    pub(super) fn add_pre(
        &mut self,
        name: String,
        hook: Arc<dyn PreDispatchHook>,
        settings: HookSettings,
    ) {
        self.pre.push(Registered {
            name,
            settings,
            hook,
        });
    }

    pub(super) fn add_post(
        &mut self,
        name: String,
        hook: Arc<dyn PostResultHook>,
        settings: HookSettings,
    ) {
        self.post.push(Registered {
            name,
            settings,
            hook,
        });
    }

    /// The timeout of hooks that set none of their own.
    pub(super) fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Whether any pre-dispatch hook is registered.
    pub(super) fn any_pre(&self) -> bool {
        !self.pre.is_empty()
    }

    /// Whether any post-result hook is registered.
    pub(super) fn any_post(&self) -> bool {
        !self.post.is_empty()
    }

    /// The registered hooks' names, by stage, for `Debug`.
    pub(super) fn names(&self) -> (Vec<&str>, Vec<&str>) {
        (
            self.pre.iter().map(|h| h.name.as_str()).collect(),
            self.post.iter().map(|h| h.name.as_str()).collect(),
        )
    }

    fn timeout_of(&self, settings: HookSettings) -> Duration {
        settings.timeout.unwrap_or(self.timeout)
    }
}

/// How one run of a hook ended.
enum Ran<T> {
    Answered(T),
    TimedOut(Duration),
    Panicked,
}

/// Runs `make`'s future within `timeout`, catching a panic in making or polling it.
async fn run<'a, T>(
    timeout: Duration,
    make: impl FnOnce() -> Pin<Box<dyn Future<Output = T> + Send + 'a>>,
) -> Ran<T> {
    let Ok(future) = std::panic::catch_unwind(AssertUnwindSafe(make)) else {
        return Ran::Panicked;
    };
    match tokio::time::timeout(timeout, CatchUnwind(future)).await {
        Ok(Some(answer)) => Ran::Answered(answer),
        Ok(None) => Ran::Panicked,
        Err(_) => Ran::TimedOut(timeout),
    }
}

/// A boxed future whose panic while polled ends it with `None` instead of unwinding into
/// the pipeline.
struct CatchUnwind<'a, T>(Pin<Box<dyn Future<Output = T> + Send + 'a>>);

impl<T> Future for CatchUnwind<'_, T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let future = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Ready(answer)) => Poll::Ready(Some(answer)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(None),
        }
    }
}

/// The note of a hook's run: the name bounded, the reason scrubbed and bounded.
fn note(
    scrubber: &Scrubber,
    name: &str,
    stage: HookStage,
    outcome: HookOutcome,
    reason: Option<&str>,
) -> HookNote {
    HookNote::new(
        scrubber.bounded(name, MAX_ACTION_NAME),
        stage,
        outcome,
        reason.map(|r| scrubber.bounded(r, MAX_REASON)),
    )
}

/// How a failed run is told: `did not answer within 2s`, `panicked`.
fn failure<T>(ran: &Ran<T>) -> (HookOutcome, String) {
    match ran {
        Ran::TimedOut(after) => (
            HookOutcome::Timeout,
            format!("did not answer within {}", humantime(*after)),
        ),
        _ => (HookOutcome::Panic, "panicked".to_owned()),
    }
}

/// How a hook that did not answer (`failed`) ends, for either stage: open (recorded, the call
/// goes on) when its settings say so, else closed, with `closed(how)` as the refusal's words.
/// Returns the note's outcome and reason, and the refusal's reason when it fails closed.
fn unanswered<T>(
    failed: &Ran<T>,
    fail_open: bool,
    closed: impl FnOnce(&str) -> String,
) -> (HookOutcome, Option<String>, Option<String>) {
    let (outcome, how) = failure(failed);
    if fail_open {
        (
            HookOutcome::FailedOpen,
            Some(format!("{how}; failed open")),
            None,
        )
    } else {
        let why = closed(&how);
        (outcome, Some(how), Some(why))
    }
}

/// `2s`, `250ms`.
fn humantime(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Runs the pre-dispatch hooks in order on a consented call; the first that denies (or
/// fails closed) refuses it with `hook_denied`. Every run is noted on `record`.
pub(super) async fn pre_dispatch(
    hooks: &Hooks,
    record: &mut CallRecord,
    session: &Session,
    consented: &Consented,
) -> Result<(), Refusal> {
    let call = consented.call();
    let scrubber = Arc::clone(call.scrubber());
    let request = PreDispatchRequest {
        attempt_id: &record.attempt_id,
        action: &call.spec().name,
        effect: call.spec().effect,
        session,
        arguments: call.arguments(),
        objects: call.objects(),
        request: &call.summary().0,
        consent: consented.decision(),
    };
    let mut notes = Vec::new();
    let mut refusal = None;
    for hook in &hooks.pre {
        let timeout = hooks.timeout_of(hook.settings);
        let ran = run(timeout, || hook.hook.check(&request)).await;
        let stage = HookStage::PreDispatch;
        let (outcome, reason, denied) = match ran {
            Ran::Answered(PreDispatchDecision::Allow) => (HookOutcome::Allowed, None, None),
            Ran::Answered(PreDispatchDecision::Deny(reason)) => {
                let shown = scrubber.bounded(&reason, MAX_REASON);
                let why = format!(
                    "the host's check `{}` denied the call: {shown}; nothing was sent",
                    scrubber.bounded(&hook.name, MAX_ACTION_NAME)
                );
                (HookOutcome::Denied, Some(reason), Some(why))
            }
            failed => unanswered(&failed, hook.settings.fail_open, |how| {
                format!(
                    "the host's check `{}` {how}, so the call fails closed; nothing was sent",
                    scrubber.bounded(&hook.name, MAX_ACTION_NAME)
                )
            }),
        };
        notes.push(note(
            &scrubber,
            &hook.name,
            stage,
            outcome,
            reason.as_deref(),
        ));
        if let Some(why) = denied {
            refusal = Some(Refusal::new(RefusalCode::HookDenied, why));
            break;
        }
    }
    record.hooks_ran(notes);
    refusal.map_or(Ok(()), Err)
}

/// Runs the post-result hooks in order on a filtered answer: each sees the answer as the
/// ones before left it; the first that refuses (or fails closed) withholds it with
/// `hook_refused`. Every run is noted on `record`.
pub(super) async fn post_result(
    hooks: &Hooks,
    record: &mut CallRecord,
    session: &Session,
    mut filtered: Filtered,
) -> Filtered {
    let (call, result) = filtered.parts_mut();
    let scrubber = Arc::clone(call.scrubber());
    let spec = call.spec();
    let mut notes = Vec::new();
    for hook in &hooks.post {
        let timeout = hooks.timeout_of(hook.settings);
        let request = PostResultRequest {
            action: &spec.name,
            effect: spec.effect,
            session,
            result,
        };
        let ran = run(timeout, || hook.hook.check(&request)).await;
        let stage = HookStage::PostResult;
        let name = scrubber.bounded(&hook.name, MAX_ACTION_NAME);
        let (outcome, reason, refused) = match ran {
            Ran::Answered(PostResultDecision::Keep) => (HookOutcome::Allowed, None, None),
            Ran::Answered(PostResultDecision::Mask(edited)) => {
                let edited = *edited;
                result.data = edited.data;
                result.reason = edited.reason;
                result.next = edited.next;
                filter::scrub_result(&scrubber, result);
                (HookOutcome::Masked, None, None)
            }
            Ran::Answered(PostResultDecision::Refuse(reason)) => {
                let shown = scrubber.bounded(&reason, MAX_REASON);
                let why = format!("the host's check `{name}` withheld the answer: {shown}");
                (HookOutcome::Refused, Some(reason), Some(why))
            }
            failed => unanswered(&failed, hook.settings.fail_open, |how| {
                format!("the host's check `{name}` {how}, so the answer is withheld")
            }),
        };
        notes.push(note(
            &scrubber,
            &hook.name,
            stage,
            outcome,
            reason.as_deref(),
        ));
        if let Some(why) = refused {
            withhold(result, spec.effect.is_mutating(), &why);
            break;
        }
    }
    record.hooks_ran(notes);
    filtered
}

/// Withholds the answer: no data and no `next`. A read (or an answer that was a rejection
/// already) becomes `rejected` by the executor; an action that changes state keeps the
/// status the upstream gave (as `secret_in_answer` does), so the agent is never told that an
/// effect that happened did not.
fn withhold(result: &mut ActionResult, mutating: bool, why: &str) {
    let sent = if !mutating {
        result.status = Status::Rejected;
        "the request was sent; nothing changed upstream"
    } else if result.status == Status::Rejected {
        "the request was sent; the upstream rejected the call"
    } else {
        "the request was sent and its status stands; do not repeat the call"
    };
    result.data = None;
    result.next = None;
    result.origin = Some(Origin::Executor);
    result.code = Some(RefusalCode::HookRefused.into());
    result.reason = Some(format!("{why}; {sent}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_told_in_the_unit_it_was_set_in() {
        assert_eq!(humantime(Duration::from_secs(2)), "2s");
        assert_eq!(humantime(Duration::from_millis(250)), "250ms");
        assert_eq!(humantime(Duration::from_millis(1500)), "1500ms");
    }

    #[tokio::test]
    async fn a_panic_while_polled_or_made_is_caught_and_a_slow_future_times_out() {
        let polled = run::<u8>(Duration::from_secs(1), || {
            Box::pin(async {
                tokio::task::yield_now().await;
                panic!("boom")
            })
        })
        .await;
        assert!(matches!(polled, Ran::Panicked));
        let made = run::<u8>(Duration::from_secs(1), || panic!("boom")).await;
        assert!(matches!(made, Ran::Panicked));
        let slow = run::<u8>(Duration::from_millis(20), || {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                1
            })
        })
        .await;
        assert!(matches!(slow, Ran::TimedOut(d) if d == Duration::from_millis(20)));
        let quick = run(Duration::from_secs(1), || Box::pin(async { 7 })).await;
        assert!(matches!(quick, Ran::Answered(7)));
    }
}
