//! Stage 4, authorize: every scoped object is inside the session's scope, else
//! `out_of_scope`; the action's channel is configured, else `channel_unavailable`; and the
//! channel accepts the concrete call and prepares its request, else `invalid_request`; and
//! the host's policy, when there is one, lets the call through, else `policy_denied`
//! ([`super::policy`]).

use std::fmt;
use std::sync::Arc;

use super::Inner;
use super::policy::{self, PolicyCheck, Purpose};
use super::validate::Validated;
use crate::channel::{CallView, Channel, PreparedRequest, RequestSummary};
use crate::code::RefusalCode;
use crate::outcome::Refusal;
use crate::scrub::Scrubber;
use crate::session::Session;
use crate::vault::Credential;

/// A call inside the session's scope, with the request its channel prepared for it. Only
/// `authorize` makes one.
pub(crate) struct Authorized {
    validated: Validated,
    channel: Arc<dyn Channel>,
    request: Box<dyn PreparedRequest>,
    /// The request's summary, rendered once when the request was prepared and again only
    /// when binding a credential changed the request.
    summary: RequestSummary,
    policy: PolicyCheck,
}

impl fmt::Debug for Authorized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authorized")
            .field("validated", &self.validated)
            .field("channel", &self.channel.name())
            .field("request", &self.request)
            .field("policy", &self.policy)
            .finish()
    }
}

impl Authorized {
    /// What stages 2 and 3 established.
    pub(crate) fn validated(&self) -> &Validated {
        &self.validated
    }

    /// The channel that will send the request.
    pub(crate) fn channel(&self) -> &Arc<dyn Channel> {
        &self.channel
    }

    /// The prepared request, exactly as it will be sent.
    pub(crate) fn request(&self) -> &dyn PreparedRequest {
        self.request.as_ref()
    }

    /// The request's summary now (after the vault stage bound the credential, with the real
    /// destination).
    pub(crate) fn summary(&self) -> &RequestSummary {
        &self.summary
    }

    /// What the host's policy decided (nothing without a policy).
    pub(crate) fn policy(&self) -> &PolicyCheck {
        &self.policy
    }

    /// Binds the credential resolved at stage 6 to the prepared request.
    pub(super) fn bind(&mut self, credential: &Credential) -> Result<(), Refusal> {
        self.request.bind(credential)?;
        self.summary = self.request.summary();
        Ok(())
    }
}

/// Checks scope, lets the channel prepare the request, and asks the host's policy.
pub(super) fn authorize(
    inner: &Inner,
    scrubber: &Scrubber,
    session: &Session,
    validated: Validated,
    purpose: Purpose<'_>,
) -> Result<Authorized, Refusal> {
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
    let policy = policy::check(
        inner.policy.as_deref(),
        &inner.call_log,
        scrubber,
        session,
        &validated,
        purpose,
    )?;
    Ok(Authorized {
        validated,
        channel,
        summary: request.summary(),
        request,
        policy,
    })
}
