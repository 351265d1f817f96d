//! Why a delivery was refused: one code per check, each with its HTTP status.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sallyport_vocab::string_enum;

string_enum! {
    /// The `error` of a refused delivery's body `{"error": code, "reason": text}`.
    ///
    /// A refused delivery decided nothing and appended nothing to the journal, except
    /// `decision_refused`, whose refusal is audited (the step `refused`). The 4xx codes are
    /// the sender's to fix (a retry of the same bytes gets the same answer); the 5xx codes are
    /// this side's, and the same delivery may be retried while its timestamp is in the window.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum RefusalCode {
        /// 401: the signature is not the HMAC of this timestamp and body under the shared
        /// secret (wrong secret, or a body or timestamp changed after signing).
        BadSignature => "bad_signature",
        /// 413: the body is longer than the receiver's limit.
        BodyTooLarge => "body_too_large",
        /// 403: the delivery was authentic but the approver it names may not decide this
        /// approval: it requested the call (separation of duties), or the decision policy gives
        /// it no authority. The refusal is audited; nothing was decided.
        DecisionRefused => "decision_refused",
        /// 500: the receiver failed unexpectedly; nothing was decided.
        InternalError => "internal_error",
        /// 400: the body is not JSON, or not of the decision's shape.
        InvalidBody => "invalid_body",
        /// 503: the approval store cannot be used; nothing was decided.
        JournalUnavailable => "journal_unavailable",
        /// 400: the `Sallyport-Signature` header is not `t=<unix seconds>,v1=<64 hex>`.
        MalformedSignature => "malformed_signature",
        /// 400: there is no `Sallyport-Signature` header.
        MissingSignature => "missing_signature",
        /// 409: this delivery (timestamp and signature) was already accepted.
        Replayed => "replayed",
        /// 503: the shared secret cannot be resolved from the vault (missing, or unusable);
        /// nothing was checked beyond the timestamp.
        SecretUnavailable => "secret_unavailable",
        /// 401: the signed timestamp is further from this server's clock than the replay
        /// window, in either direction.
        StaleTimestamp => "stale_timestamp",
        /// 503: more deliveries than the receiver remembers arrived within one replay window.
        TooManyDeliveries => "too_many_deliveries",
        /// 404: no approval has that id.
        UnknownApproval => "unknown_approval",
        /// 503: the vault is locked, so the shared secret cannot be read and nothing can be
        /// verified.
        VaultLocked => "vault_locked",
    }
}

impl RefusalCode {
    /// The HTTP status the receiver answers with.
    pub fn status(self) -> StatusCode {
        match self {
            Self::BadSignature | Self::StaleTimestamp => StatusCode::UNAUTHORIZED,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::DecisionRefused => StatusCode::FORBIDDEN,
            Self::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            Self::InvalidBody | Self::MalformedSignature | Self::MissingSignature => {
                StatusCode::BAD_REQUEST
            }
            Self::JournalUnavailable
            | Self::SecretUnavailable
            | Self::TooManyDeliveries
            | Self::VaultLocked => StatusCode::SERVICE_UNAVAILABLE,
            Self::Replayed => StatusCode::CONFLICT,
            Self::UnknownApproval => StatusCode::NOT_FOUND,
        }
    }
}

/// A refusal: the code and a sentence written here (never text from the request).
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) code: RefusalCode,
    pub(crate) reason: &'static str,
}

impl Refused {
    pub(crate) fn new(code: RefusalCode, reason: &'static str) -> Self {
        Self { code, reason }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        (
            self.code.status(),
            Json(serde_json::json!({"error": self.code.as_str(), "reason": self.reason})),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The wire names, pinned as they were when the table was written by hand, through
    // `as_str`, `Display`, `FromStr`, `parse` and serde.
    sallyport_vocab::__string_enum_tests! {
        every_code_round_trips_through_serde_and_as_str: RefusalCode = [
            "bad_signature", "body_too_large", "decision_refused", "internal_error", "invalid_body",
            "journal_unavailable", "malformed_signature", "missing_signature", "replayed",
            "secret_unavailable", "stale_timestamp", "too_many_deliveries", "unknown_approval",
            "vault_locked",
        ];
    }

    #[test]
    fn sender_mistakes_are_4xx_and_this_sides_failures_5xx() {
        let server_side = [
            RefusalCode::InternalError,
            RefusalCode::JournalUnavailable,
            RefusalCode::SecretUnavailable,
            RefusalCode::TooManyDeliveries,
            RefusalCode::VaultLocked,
        ];
        for &code in RefusalCode::ALL {
            assert_eq!(
                code.status().is_server_error(),
                server_side.contains(&code),
                "{code}"
            );
        }
        assert_eq!(RefusalCode::Replayed.status(), StatusCode::CONFLICT);
        assert_eq!(
            RefusalCode::StaleTimestamp.status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(RefusalCode::UnknownApproval.status(), StatusCode::NOT_FOUND);
        assert_eq!(RefusalCode::DecisionRefused.status(), StatusCode::FORBIDDEN);
    }
}
