//! Stage 12, filter: every secret the call's scrubber knows is removed from everything the
//! agent will read (a vault locked meanwhile cannot empty the call's scrubber); then the
//! personal data the action declares is masked or dropped ([`crate::sensitive`]); then the
//! answer guards of [`crate::inspect`] look for credential-shaped values the vault does not
//! know and instruction-shaped text, and mask, strip or withhold as the action declares; last,
//! the host's post-result hooks ([`super::hooks`]) may mask more or withhold it. The helpers
//! below scrub the other texts that leave a call the same way: audit events (every record
//! the call writes, a cancelled call's too) and the consent request.

use std::fmt;

use super::intent::Intended;
use super::normalize::Normalized;
use crate::code::Code;
use crate::journal::AuditEvent;
use crate::outcome::ActionResult;
use crate::scrub::{CUT, Scrubber};

/// The agent's answer, scrubbed. Only this stage's `filter` makes one.
pub(crate) struct Filtered {
    intended: Intended,
    sends: u32,
    result: ActionResult,
    upstream_status: Option<i64>,
}

impl fmt::Debug for Filtered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filtered")
            .field("intended", &self.intended)
            .field("status", &self.result.status)
            .finish_non_exhaustive()
    }
}

impl Filtered {
    pub(super) fn into_parts(self) -> (Intended, u32, ActionResult, Option<i64>) {
        (self.intended, self.sends, self.result, self.upstream_status)
    }

    /// The call and its answer, for the post-result hooks that end this stage
    /// ([`super::hooks`]): they may mask more of the answer, or withhold it.
    pub(super) fn parts_mut(&mut self) -> (&super::call::Call, &mut ActionResult) {
        (self.intended.call(), &mut self.result)
    }
}

/// Scrubs the answer with the call's scrubber, then inspects it as the action declares.
pub(super) fn filter(inner: &super::Inner, normalized: Normalized) -> Filtered {
    let (intended, sends, mut result, upstream_status) = normalized.into_parts();
    let call = intended.call();
    scrub_result(call.scrubber(), &mut result);
    let spec = call.entry().spec();
    crate::sensitive::apply(&spec.sensitive, &spec.personal_data, &mut result);
    crate::inspect::inspect(
        inner.secret_scanner.as_deref(),
        call.entry().spec(),
        &mut result,
    );
    Filtered {
        intended,
        sends,
        result,
        upstream_status,
    }
}

/// Scrubs every text and value of `result`.
pub(super) fn scrub_result(scrubber: &Scrubber, result: &mut ActionResult) {
    if let Some(reason) = &mut result.reason {
        scrub_in_place(scrubber, reason);
    }
    scrub_code(scrubber, &mut result.code);
    if let Some(data) = &mut result.data {
        scrubber.scrub_json(data);
    }
    if let Some(next) = &mut result.next {
        scrubber.scrub_json(&mut next.arguments);
    }
}

/// Scrubs every text of an audit event; a text that was cut ([`CUT`] at its end) also loses
/// a secret fragment left at the cut.
pub(crate) fn scrub_event(scrubber: &Scrubber, event: &mut AuditEvent) {
    scrub_in_place(scrubber, &mut event.action);
    scrub_code(scrubber, &mut event.code);
    for text in [&mut event.reason, &mut event.note, &mut event.request]
        .into_iter()
        .flatten()
    {
        scrub_cut_in_place(scrubber, text);
    }
    for object in &mut event.objects {
        scrub_in_place(scrubber, &mut object.value);
    }
    if let Some(reason) = event.policy.as_mut().and_then(|p| p.reason.as_mut()) {
        scrub_cut_in_place(scrubber, reason);
    }
    if let Some(shadow) = &mut event.shadow {
        for text in [&mut shadow.reason, &mut shadow.failed]
            .into_iter()
            .flatten()
        {
            scrub_cut_in_place(scrubber, text);
        }
    }
    for hook in &mut event.hooks {
        scrub_in_place(scrubber, &mut hook.name);
        if let Some(reason) = &mut hook.reason {
            scrub_cut_in_place(scrubber, reason);
        }
    }
}

/// Scrubs `text` where it is: a text with nothing to redact (the usual case) is left as it
/// is, not copied.
pub(crate) fn scrub_in_place(scrubber: &Scrubber, text: &mut String) {
    if let std::borrow::Cow::Owned(clean) = scrubber.scrub(text) {
        *text = clean;
    }
}

/// [`scrub_cut`] where the text is, copying it only when something is redacted.
pub(crate) fn scrub_cut_in_place(scrubber: &Scrubber, text: &mut String) {
    if let std::borrow::Cow::Owned(clean) = scrub_cut(scrubber, text) {
        *text = clean;
    }
}

/// Scrubs a code: a channel may report a code of its own making, so it passes the scrubber
/// too; a known code is left as it is.
pub(crate) fn scrub_code(scrubber: &Scrubber, code: &mut Option<Code>) {
    if let Some(text) = code
        && let std::borrow::Cow::Owned(clean) = scrubber.scrub(text.as_str())
    {
        *text = Code::from(clean);
    }
}

/// `text` scrubbed; when it ends with the [`CUT`] mark, a secret fragment before the mark is
/// redacted too.
pub(crate) fn scrub_cut<'t>(scrubber: &Scrubber, text: &'t str) -> std::borrow::Cow<'t, str> {
    match text.strip_suffix(CUT) {
        Some(head) => format!("{}{CUT}", scrubber.scrub_head(head)).into(),
        None => scrubber.scrub(text),
    }
}
