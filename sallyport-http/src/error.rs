//! Errors of building a channel and of the idempotency probe.

/// Why an [`HttpChannel`](crate::HttpChannel) could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A base URL is unusable.
    #[error("invalid base URL: {reason}")]
    InvalidBaseUrl {
        /// Why.
        reason: String,
    },
    /// The idempotency header name is not a valid header name, or one the channel owns.
    #[error("invalid idempotency header name `{0}`")]
    InvalidIdempotencyHeader(String),
    /// The TLS configuration could not be built.
    #[error("TLS setup failed")]
    Tls(#[source] rustls::Error),
    /// A root certificate could not be added.
    #[error("invalid root certificate")]
    RootCertificate,
    /// The HTTP client could not be built.
    #[error("HTTP client setup failed")]
    Client(#[source] reqwest::Error),
    /// A limit is out of range.
    #[error("invalid limit: {0}")]
    InvalidLimit(&'static str),
    /// The OpenAPI guard of an action of the channel's catalog cannot be compiled from the
    /// attached document (the source says why).
    #[cfg(feature = "openapi")]
    #[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
    #[error("the OpenAPI document cannot check action `{action}`")]
    OpenApi {
        /// The action.
        action: String,
        /// Why the operation's guard did not compile.
        #[source]
        source: sallyport_openapi::OpenApiError,
    },
}

/// Why the idempotency probe could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// The action is not an HTTP action.
    #[error("action `{0}` has no HTTP target")]
    NotHttp(String),
    /// The request (or its changed twin) would be refused by the channel.
    #[error("the probe request was refused: {0}")]
    Refused(String),
    /// The two payloads are byte-identical, so the probe could not tell a replay from a check.
    #[error("the changed arguments produce the same payload as the original ones")]
    SamePayload,
    /// A request failed before or after sending (no status to report).
    #[error("probe request {step} got no response")]
    NoResponse {
        /// Which request: 1, 2 or 3.
        step: u8,
    },
}

/// Whether a transport error is a TLS handshake that refused the upstream's certificate
/// (unknown issuer, expired, wrong name, revoked, …). The error chain is walked, looking
/// into `io::Error`s too: their `source` skips the error they wrap.
pub(crate) fn is_untrusted_certificate(error: &(dyn std::error::Error + 'static)) -> bool {
    chain_has(error, is_certificate_error)
}

/// Whether a transport error is the upstream refusing this side's client certificate (or
/// its absence) in the TLS handshake: a fatal alert about a certificate, which a server
/// sends only while it checks the client's certificate, before it reads any request (in
/// TLS 1.3 the request may already have been written, and is never read).
pub(crate) fn is_client_certificate_refused(error: &(dyn std::error::Error + 'static)) -> bool {
    chain_has(error, |e| {
        matches!(
            e.downcast_ref::<rustls::Error>(),
            Some(rustls::Error::AlertReceived(
                rustls::AlertDescription::CertificateRequired
                    | rustls::AlertDescription::BadCertificate
                    | rustls::AlertDescription::UnsupportedCertificate
                    | rustls::AlertDescription::CertificateRevoked
                    | rustls::AlertDescription::CertificateExpired
                    | rustls::AlertDescription::CertificateUnknown
                    | rustls::AlertDescription::UnknownCA
                    | rustls::AlertDescription::AccessDenied
            ))
        )
    })
}

/// Whether an error of `error`'s chain satisfies `test`.
fn chain_has(
    error: &(dyn std::error::Error + 'static),
    test: impl Fn(&(dyn std::error::Error + 'static)) -> bool,
) -> bool {
    let mut current = Some(error);
    // A chain is short; the bound only guards against a cycle.
    for _ in 0..16 {
        let Some(e) = current else { return false };
        if test(e) {
            return true;
        }
        current = match e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    false
}

fn is_certificate_error(error: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        error.downcast_ref::<rustls::Error>(),
        Some(
            rustls::Error::InvalidCertificate(_)
                | rustls::Error::NoCertificatesPresented
                | rustls::Error::UnsupportedNameType
        )
    )
}
