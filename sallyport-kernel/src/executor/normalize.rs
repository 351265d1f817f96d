//! Stage 11, normalize: the channel's outcome becomes one of the five statuses, by rules
//! that hold for every channel (nothing sent means nothing happened), with `next` from the
//! action's reconcile action for `pending` and `unknown`. An upstream that rejected the
//! credential marks it unusable until it is replaced.

use std::fmt;

use serde_json::{Map, Value};

use super::Inner;
use super::dispatch::Dispatched;
use super::intent::Intended;
use crate::catalog::{Catalog, Entry};
use crate::channel::ChannelOutcome;
use crate::code::{Code, UpstreamCode};
use crate::outcome::{ActionResult, Next, Origin, Status};
use sallyport_vocab::MAX_REASON;

/// The answer the agent will get, before scrubbing. Only this stage's `normalize` makes one.
pub(crate) struct Normalized {
    intended: Intended,
    sends: u32,
    result: ActionResult,
    upstream_status: Option<i64>,
}

impl fmt::Debug for Normalized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Normalized")
            .field("intended", &self.intended)
            .field("status", &self.result.status)
            .field("sends", &self.sends)
            .finish_non_exhaustive()
    }
}

impl Normalized {
    pub(super) fn into_parts(self) -> (Intended, u32, ActionResult, Option<i64>) {
        (self.intended, self.sends, self.result, self.upstream_status)
    }
}

/// Normalizes the channel's outcome into the agent's result.
pub(super) fn normalize(inner: &Inner, action: &str, dispatched: Dispatched) -> Normalized {
    let (intended, outcome, sends) = dispatched.into_parts();
    let outcome = nothing_sent_is_nothing_done(outcome, sends);
    let call = intended.call();
    // A credential resolved for a subject is that one user's grant: an upstream refusing it
    // must not stop every other user's calls (the channel marks that subject's grant).
    if outcome.credential_rejected
        && let Some(credential) = call.credential()
        && credential.subject().is_none()
    {
        let meta = credential.meta();
        match inner.unusable.lock() {
            Ok(mut unusable) => {
                unusable.insert(meta.name.clone(), meta.version);
            }
            Err(_) => {
                tracing::error!(credential = %meta.name, "the credential-failure map is poisoned; later calls refuse every credential");
            }
        }
    }
    let mut result =
        ActionResult::new(outcome.status, action, intended.intent().attempt_id.clone());
    if matches!(outcome.status, Status::Rejected | Status::Unknown)
        || outcome.origin == Origin::Executor
    {
        result.origin = Some(outcome.origin);
    }
    result.code = outcome.code.clone();
    result.reason = outcome
        .reason
        .as_deref()
        .map(|r| call.scrubber().bounded(r, MAX_REASON));
    result.next = outcome.next.clone().or_else(|| {
        matches!(outcome.status, Status::Pending | Status::Unknown)
            .then(|| {
                next_call(
                    &inner.catalog,
                    call.entry(),
                    call.arguments(),
                    outcome.data.as_ref(),
                )
            })
            .flatten()
    });
    result.data = outcome.data;
    result.connect = outcome.connect;
    if outcome.status == Status::Unknown && result.reason.is_none() {
        result.reason = Some(match &result.next {
            Some(next) => format!(
                "the outcome is unknown; do not retry; check with {}",
                next.action
            ),
            None => "the outcome is unknown; do not retry".to_owned(),
        });
    }
    Normalized {
        intended,
        sends,
        result,
        upstream_status: outcome.upstream_status,
    }
}

/// A channel that reports anything but `rejected` without ever sending is wrong; be
/// conservative.
fn nothing_sent_is_nothing_done(mut outcome: ChannelOutcome, sends: u32) -> ChannelOutcome {
    if sends == 0 && outcome.status != Status::Rejected {
        outcome.status = Status::Rejected;
        outcome.origin = Origin::Executor;
        outcome.code = Some(
            outcome
                .code
                .unwrap_or(Code::Upstream(UpstreamCode::NotSent)),
        );
        outcome.data = None;
    }
    outcome
}

/// The follow-up call: the action's reconcile action, with its input fields taken from the
/// result data first and the original arguments second.
fn next_call(
    catalog: &Catalog,
    entry: &Entry,
    arguments: &Value,
    data: Option<&Value>,
) -> Option<Next> {
    let reconcile = entry.spec().reconcile.as_ref()?;
    // The catalog refuses a reconcile action it does not hold, so the lookup succeeds; a
    // reconcile action whose schema names no properties takes no arguments: `{}`.
    let properties = catalog
        .get(reconcile)
        .and_then(|target| target.input_schema().get("properties"))
        .and_then(Value::as_object);
    let mut args = Map::new();
    for name in properties.into_iter().flat_map(Map::keys) {
        let value = data
            .and_then(|d| d.get(name))
            .or_else(|| arguments.get(name));
        if let Some(v) = value {
            args.insert(name.clone(), v.clone());
        }
    }
    Some(Next {
        action: reconcile.to_string(),
        arguments: Value::Object(args),
    })
}
