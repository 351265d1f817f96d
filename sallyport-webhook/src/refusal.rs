//! Why a delivery was refused: one code per check, each with its HTTP status.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// The `error` of a refused delivery's body `{"error": code, "reason": text}`.
///
/// A refused delivery decided nothing and appended nothing to the journal. The 4xx codes are
/// the sender's to fix (a retry of the same bytes gets the same answer); the 5xx codes are
/// this side's, and the same delivery may be retried while its timestamp is in the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefusalCode {
    /// 401: the signature is not the HMAC of this timestamp and body under the shared
    /// secret (wrong secret, or a body or timestamp changed after signing).
    BadSignature,
    /// 413: the body is longer than the receiver's limit.
    BodyTooLarge,
    /// 500: the receiver failed unexpectedly; nothing was decided.
    InternalError,
    /// 400: the body is not JSON, or not of the decision's shape.
    InvalidBody,
    /// 503: the approval store cannot be used; nothing was decided.
    JournalUnavailable,
    /// 400: the `Sallyport-Signature` header is not `t=<unix seconds>,v1=<64 hex>`.
    MalformedSignature,
    /// 400: there is no `Sallyport-Signature` header.
    MissingSignature,
    /// 409: this delivery (timestamp and signature) was already accepted.
    Replayed,
    /// 503: the shared secret cannot be resolved from the vault (missing, or unusable);
    /// nothing was checked beyond the timestamp.
    SecretUnavailable,
    /// 401: the signed timestamp is further from this server's clock than the replay
    /// window, in either direction.
    StaleTimestamp,
    /// 503: more deliveries than the receiver remembers arrived within one replay window.
    TooManyDeliveries,
    /// 404: no approval has that id.
    UnknownApproval,
    /// 503: the vault is locked, so the shared secret cannot be read and nothing can be
    /// verified.
    VaultLocked,
}

impl RefusalCode {
    /// Every code.
    pub const ALL: [Self; 13] = [
        Self::BadSignature,
        Self::BodyTooLarge,
        Self::InternalError,
        Self::InvalidBody,
        Self::JournalUnavailable,
        Self::MalformedSignature,
        Self::MissingSignature,
        Self::Replayed,
        Self::SecretUnavailable,
        Self::StaleTimestamp,
        Self::TooManyDeliveries,
        Self::UnknownApproval,
        Self::VaultLocked,
    ];

    /// The snake-case code, as the body's `error` carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadSignature => "bad_signature",
            Self::BodyTooLarge => "body_too_large",
            Self::InternalError => "internal_error",
            Self::InvalidBody => "invalid_body",
            Self::JournalUnavailable => "journal_unavailable",
            Self::MalformedSignature => "malformed_signature",
            Self::MissingSignature => "missing_signature",
            Self::Replayed => "replayed",
            Self::SecretUnavailable => "secret_unavailable",
            Self::StaleTimestamp => "stale_timestamp",
            Self::TooManyDeliveries => "too_many_deliveries",
            Self::UnknownApproval => "unknown_approval",
            Self::VaultLocked => "vault_locked",
        }
    }

    /// The HTTP status the receiver answers with.
    pub fn status(self) -> StatusCode {
        match self {
            Self::BadSignature | Self::StaleTimestamp => StatusCode::UNAUTHORIZED,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
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

impl std::fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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

    #[test]
    fn every_code_round_trips_through_serde_and_as_str() {
        for code in RefusalCode::ALL {
            let json = serde_json::to_value(code).expect("serialize");
            assert_eq!(json, serde_json::Value::from(code.as_str()));
            let back: RefusalCode = serde_json::from_value(json).expect("deserialize");
            assert_eq!(back, code);
        }
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
        for code in RefusalCode::ALL {
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
    }
}
