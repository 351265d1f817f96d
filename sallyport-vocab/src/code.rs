//! The machine-readable codes of results and audit records, as types.
//!
//! A result's `code` says why it has its status: [`RefusalCode`] when the executor declined
//! before sending (stages 1–9), [`UpstreamCode`] for what happened at or after the send
//! (the transport, the upstream's answer, a cancellation). [`Code`] is either, or a
//! [`DeclaredCode`] that neither enum names: one an action's author declared (a body rule's
//! `code`, see `HttpTarget::with_body_rule_code` in `sallyport_core::target`),
//! one a channel of the application's own reports, a drift status or probe class in a
//! baseline or probe audit record, or one read from a record a later version wrote.
//! [`ConsentOutcome`] is what the consent stage decided, as the audit record names it.
//!
//! Every type here serializes to exactly its snake-case string, the wire format of results
//! and audit records, and parses back from it. Each enum's strings live in one table (its
//! `string_enum!` invocation below), from which `as_str`, `parse`, `ALL`, `FromStr` (an
//! [`UnknownName`] for any other string) and serde all come.
//!
//! Compare codes by type: `result.code == Some(UpstreamCode::TimeoutAfterSend.into())`,
//! or `code == RefusalCode::OutOfScope` on a [`Code`]; [`ActionResult::code_str`](crate::outcome::ActionResult::code_str)
//! gives the string.
//!
//! This module imports nothing of the crate but the vocabulary's macro.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use crate::names::UnknownName;
use crate::string_enum;

string_enum! {
    /// The code of an executor refusal (stages 1–9): nothing was sent. Also the codes of
    /// a call parked for a human's later approval (`awaiting_approval`) and of how such an
    /// approval ended before anything was sent.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    #[non_exhaustive]
    pub enum RefusalCode {
        /// The approval the call waits for has passed its expiry undecided, or was approved
        /// and could not be carried out before it expired.
        ApprovalExpired => "approval_expired",
        /// `check_approval` named an approval this journal does not hold.
        ApprovalNotFound => "approval_not_found",
        /// Arguments larger than the executor accepts.
        ArgumentsTooLarge => "arguments_too_large",
        /// The call is parked until a human decides (status `pending`); `next` names the
        /// status check.
        AwaitingApproval => "awaiting_approval",
        /// Consent was denied.
        ConsentDenied => "consent_denied",
        /// No consent provider can ask a human.
        ConsentUnavailable => "consent_unavailable",
        /// Nobody answered the consent request in time.
        ConsentTimeout => "consent_timeout",
        /// The credential cannot be used (missing, or rejected by the upstream earlier).
        CredentialUnavailable => "credential_unavailable",
        /// The live definition differs from the approved baseline.
        DefinitionDrift => "definition_drift",
        /// A pre-dispatch hook of the host denied the call, or failed (timed out, panicked)
        /// and fails closed: nothing was sent. The reason names the hook.
        HookDenied => "hook_denied",
        /// A post-result hook of the host refused the upstream's answer, or failed and
        /// fails closed: the answer is withheld. Made after the send, as `secret_in_answer`
        /// is.
        HookRefused => "hook_refused",
        /// Arguments failed the payload drift check or could not be decoded.
        InvalidArguments => "invalid_arguments",
        /// The channel refused the call before sending (a value that would change the path, …).
        InvalidRequest => "invalid_request",
        /// The attempt could not be written durably; nothing was sent.
        JournalUnavailable => "journal_unavailable",
        /// The channel the action needs is not configured.
        ChannelUnavailable => "channel_unavailable",
        /// An object is outside the session's scope.
        OutOfScope => "out_of_scope",
        /// The host's policy (`Policy`) denied the call.
        PolicyDenied => "policy_denied",
        /// The upstream's answer carried text shaped like instructions to the model, and the
        /// action declares `instructions = refuse`: the answer is withheld. Made after the
        /// send (as a withheld read's `journal_unavailable` is): for an action that changes
        /// state the status stays what the upstream answered, without its data.
        InstructionsInAnswer => "instructions_in_answer",
        /// The action's own precondition does not hold.
        PreconditionFailed => "precondition_failed",
        /// An approved call, prepared again before sending, is no longer the request the
        /// human approved (another destination, another body); the approval is void.
        RequestChanged => "request_changed",
        /// The definition changed in a way that needs a reviewer.
        ReviewRequired => "review_required",
        /// The upstream's answer carried a credential-shaped value, and the action declares
        /// `secrets = refuse`: the answer is withheld. Made after the send, as
        /// `instructions_in_answer` is.
        SecretInAnswer => "secret_in_answer",
        /// No published action has that name.
        UnknownAction => "unknown_action",
        /// The vault is locked.
        VaultLocked => "vault_locked",
    }
}

string_enum! {
    /// What happened at or after the send: reported by a channel (the transport, the
    /// upstream's answer, a command's ending) or by the executor (a call cancelled around
    /// its send, a channel that claimed an outcome without sending). The rules that pick
    /// the transport codes are shared by every channel in `sallyport_core::after_send`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    #[non_exhaustive]
    pub enum UpstreamCode {
        /// The upstream refused the credential (HTTP 401/403, SSH authentication).
        AuthFailed => "auth_failed",
        /// HTTP 400.
        BadRequest => "bad_request",
        /// A body rule said `rejected` without naming its own code.
        BusinessRejected => "business_rejected",
        /// The call's future was dropped after a request may have left.
        CancelledAfterSend => "cancelled_after_send",
        /// The call's future was dropped before anything was sent.
        CancelledBeforeSend => "cancelled_before_send",
        /// The SSH server refused to open a session channel; nothing was run.
        ChannelOpenFailed => "channel_open_failed",
        /// Another undeclared HTTP 4xx.
        ClientError => "client_error",
        /// An SSH command exited with a status the action declares as `rejected`.
        CommandRejected => "command_rejected",
        /// An SSH command exited non-zero with a status the action does not declare.
        CommandFailed => "command_failed",
        /// HTTP 409 without a declaration.
        Conflict => "conflict",
        /// The upstream could not be reached; nothing was sent.
        ConnectFailed => "connect_failed",
        /// Connecting (for SSH: handshake and authentication too) took too long; nothing was
        /// sent.
        ConnectTimeout => "connect_timeout",
        /// The connection was lost after a request of this call left, before an answer.
        ConnectionLostAfterSend => "connection_lost_after_send",
        /// The SSH credential cannot be used (a key that does not decode, a wrong kind).
        CredentialUnusable => "credential_unusable",
        /// The SSH server refused to run the command; nothing was run.
        ExecRefused => "exec_refused",
        /// HTTP 502–504.
        GatewayError => "gateway_error",
        /// The SSH handshake failed; nothing was run.
        HandshakeFailed => "handshake_failed",
        /// The SSH host key is not pinned; refused before authentication.
        HostKeyMismatch => "host_key_mismatch",
        /// The upstream is still processing the original request with this key (HTTP 409).
        IdempotencyConflict => "idempotency_conflict",
        /// The upstream requires an idempotency key it did not get (HTTP 400).
        IdempotencyKeyRequired => "idempotency_key_required",
        /// The idempotency key was used with another payload (HTTP 422).
        IdempotencyMismatch => "idempotency_mismatch",
        /// The SSH command was killed by a signal.
        KilledBySignal => "killed_by_signal",
        /// HTTP 404 or 410.
        NotFound => "not_found",
        /// The channel claimed an outcome but sent nothing.
        NotSent => "not_sent",
        /// HTTP 429 without a usable wait.
        RateLimited => "rate_limited",
        /// A redirect answered a state-changing request after it was sent (HTTP 303).
        RedirectNotFollowed => "redirect_not_followed",
        /// The upstream redirected the call; redirects are never followed.
        RedirectRefused => "redirect_refused",
        /// The SSH account's login shell does not parse POSIX quoting; nothing was run.
        RemoteShellUnsupported => "remote_shell_unsupported",
        /// HTTP 408 after the request was sent.
        RequestTimeout => "request_timeout",
        /// The response body is larger than the action reads.
        ResponseTooLarge => "response_too_large",
        /// The request was sent and the answer was cut off.
        ResponseTruncated => "response_truncated",
        /// The request was sent and no complete answer came within the timeout.
        TimeoutAfterSend => "timeout_after_send",
        /// The upstream's certificate is not trusted; nothing was sent.
        TlsUntrusted => "tls_untrusted",
        /// The upstream answered with a status the action treats as undetermined.
        Undetermined => "undetermined",
        /// An answer the action does not declare, or without the declared shape.
        UnexpectedResponse => "unexpected_response",
        /// A body rule said `unknown` without naming its own code.
        UnknownState => "unknown_state",
        /// The body is not valid JSON, so the action's body rules could not be checked.
        UnparseableBody => "unparseable_body",
        /// HTTP 422 without a declaration.
        Unprocessable => "unprocessable",
        /// HTTP 5xx other than 502–504.
        UpstreamError => "upstream_error",
        /// The upstream declined with a status the action declares as `rejected`.
        UpstreamRejected => "upstream_rejected",
    }
}

string_enum! {
    /// What the consent stage decided, as the audit record's `consent` names it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    #[non_exhaustive]
    pub enum ConsentOutcome {
        /// A human approved this call.
        Approved => "approved",
        /// The call was parked until a human decides (deferred consent).
        Deferred => "deferred",
        /// A human approved this call and the rest of the session.
        ApprovedForSession => "approved_for_session",
        /// A human said no.
        Denied => "denied",
        /// The action needs no consent.
        NotRequired => "not_required",
        /// An earlier approval for the session covered the call.
        SessionGrant => "session_grant",
        /// Nobody answered in time.
        Timeout => "timeout",
        /// A remembered approval covered the call, and no one was asked (the audit record
        /// names it).
        Remembered => "remembered",
        /// The request was too large to show in full, so no human was asked.
        TooLargeToShow => "too_large_to_show",
        /// No consent provider could ask a human.
        Unavailable => "unavailable",
    }
}

/// A code that neither [`RefusalCode`] nor [`UpstreamCode`] names (see the [module](self)
/// docs for where they come from). Built only through [`Code`]'s conversions, which turn a
/// string naming a known code into that variant, so a `DeclaredCode` never spells one and
/// codes compare by variant. Expected to be snake case; a declared code that carries a
/// secret is scrubbed like any other text that leaves the executor.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeclaredCode(Cow<'static, str>);

impl DeclaredCode {
    /// The code as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The code of a result, a channel outcome or an audit record.
///
/// Serializes as its string and deserializes from any string: a known one becomes its
/// variant, any other a [`Code::Declared`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Code {
    /// The executor declined before sending.
    Refusal(RefusalCode),
    /// What happened at or after the send.
    Upstream(UpstreamCode),
    /// A code no enum here names.
    Declared(DeclaredCode),
}

impl Code {
    /// The snake-case string of the wire format.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Refusal(code) => code.as_str(),
            Self::Upstream(code) => code.as_str(),
            Self::Declared(code) => code.as_str(),
        }
    }

    /// The code spelled `text`: a known code's variant, else a [`Code::Declared`].
    pub fn parse(text: &str) -> Self {
        Self::known(text).unwrap_or_else(|| Self::Declared(DeclaredCode(Cow::Owned(text.into()))))
    }

    /// The refusal code, if this is one.
    pub fn refusal(&self) -> Option<RefusalCode> {
        match self {
            Self::Refusal(code) => Some(*code),
            _ => None,
        }
    }

    /// The upstream code, if this is one.
    pub fn upstream(&self) -> Option<UpstreamCode> {
        match self {
            Self::Upstream(code) => Some(*code),
            _ => None,
        }
    }

    fn known(text: &str) -> Option<Self> {
        RefusalCode::parse(text)
            .map(Self::Refusal)
            .or_else(|| UpstreamCode::parse(text).map(Self::Upstream))
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Code {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self::parse(text))
    }
}

impl From<RefusalCode> for Code {
    fn from(code: RefusalCode) -> Self {
        Self::Refusal(code)
    }
}

impl From<UpstreamCode> for Code {
    fn from(code: UpstreamCode) -> Self {
        Self::Upstream(code)
    }
}

impl From<&'static str> for Code {
    fn from(text: &'static str) -> Self {
        Self::known(text).unwrap_or(Self::Declared(DeclaredCode(Cow::Borrowed(text))))
    }
}

impl From<String> for Code {
    fn from(text: String) -> Self {
        Self::known(&text).unwrap_or(Self::Declared(DeclaredCode(Cow::Owned(text))))
    }
}

impl From<Cow<'static, str>> for Code {
    fn from(text: Cow<'static, str>) -> Self {
        match text {
            Cow::Borrowed(text) => Self::from(text),
            Cow::Owned(text) => Self::from(text),
        }
    }
}

impl PartialEq<RefusalCode> for Code {
    fn eq(&self, other: &RefusalCode) -> bool {
        *self == Self::Refusal(*other)
    }
}

impl PartialEq<UpstreamCode> for Code {
    fn eq(&self, other: &UpstreamCode) -> bool {
        *self == Self::Upstream(*other)
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<'de, str>::deserialize(deserializer)?;
        Ok(match text {
            Cow::Borrowed(text) => Self::parse(text),
            Cow::Owned(text) => Self::from(text),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round-trips every variant through the exact string of the wire format, as JSON and
    /// through `as_str`/`parse`/`FromStr`, and checks the table covers every variant.
    fn round_trip<T>(table: &[(T, &str)], all: &[T])
    where
        T: Copy + PartialEq + fmt::Debug + fmt::Display + FromStr + Serialize,
        T: for<'de> Deserialize<'de>,
        <T as FromStr>::Err: fmt::Debug,
    {
        assert_eq!(
            table.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
            all,
            "the table must list every variant, in declaration order"
        );
        for (variant, text) in table {
            assert_eq!(variant.to_string(), *text);
            assert_eq!(
                serde_json::to_string(variant).unwrap(),
                format!("\"{text}\"")
            );
            assert_eq!(
                serde_json::from_str::<T>(&format!("\"{text}\"")).unwrap(),
                *variant
            );
            assert_eq!(text.parse::<T>().unwrap(), *variant);
        }
    }

    #[test]
    fn refusal_codes_round_trip_to_the_wire_strings() {
        use RefusalCode::*;
        let table = [
            (ApprovalExpired, "approval_expired"),
            (ApprovalNotFound, "approval_not_found"),
            (ArgumentsTooLarge, "arguments_too_large"),
            (AwaitingApproval, "awaiting_approval"),
            (ConsentDenied, "consent_denied"),
            (ConsentUnavailable, "consent_unavailable"),
            (ConsentTimeout, "consent_timeout"),
            (CredentialUnavailable, "credential_unavailable"),
            (DefinitionDrift, "definition_drift"),
            (HookDenied, "hook_denied"),
            (HookRefused, "hook_refused"),
            (InvalidArguments, "invalid_arguments"),
            (InvalidRequest, "invalid_request"),
            (JournalUnavailable, "journal_unavailable"),
            (ChannelUnavailable, "channel_unavailable"),
            (OutOfScope, "out_of_scope"),
            (PolicyDenied, "policy_denied"),
            (InstructionsInAnswer, "instructions_in_answer"),
            (PreconditionFailed, "precondition_failed"),
            (RequestChanged, "request_changed"),
            (ReviewRequired, "review_required"),
            (SecretInAnswer, "secret_in_answer"),
            (UnknownAction, "unknown_action"),
            (VaultLocked, "vault_locked"),
        ];
        round_trip(&table, RefusalCode::ALL);
        crate::__private::check_string_enum(
            "RefusalCode",
            RefusalCode::ALL,
            RefusalCode::as_str,
            RefusalCode::parse,
            &table.map(|(_, text)| text),
        );
        for (variant, text) in table {
            assert_eq!(Code::parse(text), Code::Refusal(variant));
            assert_eq!(Code::from(variant).as_str(), text);
        }
    }

    #[test]
    fn upstream_codes_round_trip_to_the_wire_strings() {
        use UpstreamCode::*;
        let table = [
            (AuthFailed, "auth_failed"),
            (BadRequest, "bad_request"),
            (BusinessRejected, "business_rejected"),
            (CancelledAfterSend, "cancelled_after_send"),
            (CancelledBeforeSend, "cancelled_before_send"),
            (ChannelOpenFailed, "channel_open_failed"),
            (ClientError, "client_error"),
            (CommandRejected, "command_rejected"),
            (CommandFailed, "command_failed"),
            (Conflict, "conflict"),
            (ConnectFailed, "connect_failed"),
            (ConnectTimeout, "connect_timeout"),
            (ConnectionLostAfterSend, "connection_lost_after_send"),
            (CredentialUnusable, "credential_unusable"),
            (ExecRefused, "exec_refused"),
            (GatewayError, "gateway_error"),
            (HandshakeFailed, "handshake_failed"),
            (HostKeyMismatch, "host_key_mismatch"),
            (IdempotencyConflict, "idempotency_conflict"),
            (IdempotencyKeyRequired, "idempotency_key_required"),
            (IdempotencyMismatch, "idempotency_mismatch"),
            (KilledBySignal, "killed_by_signal"),
            (NotFound, "not_found"),
            (NotSent, "not_sent"),
            (RateLimited, "rate_limited"),
            (RedirectNotFollowed, "redirect_not_followed"),
            (RedirectRefused, "redirect_refused"),
            (RemoteShellUnsupported, "remote_shell_unsupported"),
            (RequestTimeout, "request_timeout"),
            (ResponseTooLarge, "response_too_large"),
            (ResponseTruncated, "response_truncated"),
            (TimeoutAfterSend, "timeout_after_send"),
            (TlsUntrusted, "tls_untrusted"),
            (Undetermined, "undetermined"),
            (UnexpectedResponse, "unexpected_response"),
            (UnknownState, "unknown_state"),
            (UnparseableBody, "unparseable_body"),
            (Unprocessable, "unprocessable"),
            (UpstreamError, "upstream_error"),
            (UpstreamRejected, "upstream_rejected"),
        ];
        round_trip(&table, UpstreamCode::ALL);
        crate::__private::check_string_enum(
            "UpstreamCode",
            UpstreamCode::ALL,
            UpstreamCode::as_str,
            UpstreamCode::parse,
            &table.map(|(_, text)| text),
        );
        for (variant, text) in table {
            assert_eq!(Code::parse(text), Code::Upstream(variant));
            assert_eq!(Code::from(text), variant);
        }
    }

    #[test]
    fn consent_outcomes_round_trip_to_the_wire_strings() {
        use ConsentOutcome::*;
        let table = [
            (Approved, "approved"),
            (Deferred, "deferred"),
            (ApprovedForSession, "approved_for_session"),
            (Denied, "denied"),
            (NotRequired, "not_required"),
            (SessionGrant, "session_grant"),
            (Timeout, "timeout"),
            (Remembered, "remembered"),
            (TooLargeToShow, "too_large_to_show"),
            (Unavailable, "unavailable"),
        ];
        round_trip(&table, ConsentOutcome::ALL);
        crate::__private::check_string_enum(
            "ConsentOutcome",
            ConsentOutcome::ALL,
            ConsentOutcome::as_str,
            ConsentOutcome::parse,
            &table.map(|(_, text)| text),
        );
        assert!(serde_json::from_str::<ConsentOutcome>("\"maybe\"").is_err());
        let err = "maybe".parse::<ConsentOutcome>().unwrap_err();
        assert_eq!((err.kind, err.value.as_str()), ("ConsentOutcome", "maybe"));
    }

    #[test]
    fn no_string_names_both_a_refusal_and_an_upstream_code() {
        for code in RefusalCode::ALL {
            assert_eq!(UpstreamCode::parse(code.as_str()), None, "{code}");
        }
    }

    #[test]
    fn an_unknown_code_round_trips_as_declared_and_a_known_one_never_does() {
        for text in ["order_locked", "quarantined", "code-with-dashes"] {
            let code: Code = serde_json::from_str(&format!("\"{text}\"")).unwrap();
            assert!(matches!(code, Code::Declared(_)), "{code:?}");
            assert_eq!(code, text);
            assert_eq!(serde_json::to_string(&code).unwrap(), format!("\"{text}\""));
            assert_eq!(Code::from(text), code);
            assert_eq!(Code::from(text.to_owned()), code);
        }
        // A declared spelling of a known code is that code: comparisons by variant hold.
        assert_eq!(Code::from("rate_limited"), UpstreamCode::RateLimited);
        assert_eq!(
            Code::from(Cow::Owned("vault_locked".to_owned())),
            RefusalCode::VaultLocked
        );
        assert_eq!(
            Code::parse("timeout_after_send").upstream(),
            Some(UpstreamCode::TimeoutAfterSend)
        );
        assert_eq!(
            Code::parse("out_of_scope").refusal(),
            Some(RefusalCode::OutOfScope)
        );
        assert_ne!(Code::from(UpstreamCode::NotSent), RefusalCode::OutOfScope);
    }
}
