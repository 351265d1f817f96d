//! Stage 4, authorize: every scoped object is inside the session's scope, else
//! `out_of_scope`; the action's channel is configured, else `channel_unavailable`; and the
//! channel accepts the concrete call and prepares its request, else `invalid_request`; and
//! the host's policy, when there is one, lets the call through, else `policy_denied`
//! ([`super::policy`]).

use std::fmt;
use std::sync::Arc;

use super::Inner;
use super::call::Call;
use super::policy::{self, PolicyCheck, Purpose};
use super::validate::Validated;
use crate::channel::{CallView, Channel, PreparedRequest};
use crate::code::RefusalCode;
use crate::outcome::Refusal;
use crate::scrub::Scrubber;
use crate::session::Session;

/// A call inside the session's scope, with the request its channel prepared for it. Only
/// `authorize` makes one.
pub(crate) struct Authorized {
    call: Call,
}

impl fmt::Debug for Authorized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authorized")
            .field("call", &self.call)
            .finish()
    }
}

impl Authorized {
    /// The call as stages 1–4 established it.
    pub(crate) fn call(&self) -> &Call {
        &self.call
    }

    /// The call alone, for stage 5 to carry on.
    pub(super) fn into_call(self) -> Call {
        self.call
    }
}

/// A call inside the session's scope whose request the channel prepared, waiting for the
/// host's policy. Only `prepare` makes one.
struct Prepared {
    validated: Validated,
    channel: Arc<dyn Channel>,
    request: Box<dyn PreparedRequest>,
}

impl Prepared {
    /// The call as stages 1–3 established it.
    fn validated(&self) -> &Validated {
        &self.validated
    }
}

/// Checks scope and lets the channel prepare the request.
fn prepare(inner: &Inner, session: &Session, validated: Validated) -> Result<Prepared, Refusal> {
    for object in validated.objects() {
        if !session.permits(&object.kind, &object.value) {
            return Err(Refusal::new(
                RefusalCode::OutOfScope,
                format!(
                    "{} {} is outside this session's scope",
                    object.kind, object.value
                ),
            ));
        }
    }
    let spec = validated.entry().spec();
    let channel = spec
        .target
        .channel_name()
        .and_then(|name| inner.channels.get(name))
        .cloned()
        .ok_or_else(|| {
            Refusal::new(
                RefusalCode::ChannelUnavailable,
                format!("action `{}` has no channel configured", spec.name),
            )
        })?;
    let request = channel.prepare(&CallView {
        spec,
        arguments: validated.arguments(),
        input: validated.input(),
    })?;
    Ok(Prepared {
        validated,
        channel,
        request,
    })
}

/// The prepared call, with what the host's policy decided about it ([`policy::check`]).
fn authorized(prepared: Prepared, policy: PolicyCheck, scrubber: Arc<Scrubber>) -> Authorized {
    let Prepared {
        validated,
        channel,
        request,
    } = prepared;
    Authorized {
        call: Call::new(validated, channel, request, policy, scrubber),
    }
}

/// Checks scope, lets the channel prepare the request, and asks the host's policy with the
/// counts the executor keeps (shared by the fleet when it has a store).
pub(super) async fn authorize(
    inner: &Inner,
    scrubber: Arc<Scrubber>,
    session: &Session,
    validated: Validated,
    purpose: Purpose<'_>,
) -> Result<Authorized, Refusal> {
    let prepared = prepare(inner, session, validated)?;
    let policy = policy::check(
        inner.policy.as_deref(),
        inner.shadow.as_ref(),
        &inner.calls,
        &scrubber,
        session,
        prepared.validated(),
        purpose,
    )
    .await?;
    Ok(authorized(prepared, policy, scrubber))
}

/// [`authorize`] without waiting, for preflight: the policy decides with the calls this
/// process counted, and nothing is counted.
pub(super) fn authorize_now(
    inner: &Inner,
    scrubber: Arc<Scrubber>,
    session: &Session,
    validated: Validated,
) -> Result<Authorized, Refusal> {
    let prepared = prepare(inner, session, validated)?;
    let policy = policy::check_now(
        inner.policy.as_deref(),
        inner.shadow.as_ref(),
        &inner.calls,
        &scrubber,
        session,
        prepared.validated(),
        Purpose::Preflight,
    )?;
    Ok(authorized(prepared, policy, scrubber))
}
