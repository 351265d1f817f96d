//! Channel configuration: base URLs, limits, the idempotency header, backoff.

use std::net::IpAddr;
use std::time::Duration;

use url::{Host, Url};

use crate::error::BuildError;

/// A validated base URL: `http` or `https`, a host, and an optional path prefix; no user
/// info, query or fragment. Request paths are appended to its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseUrl(Url);

impl BaseUrl {
    /// Parses and checks a base URL.
    ///
    /// # Errors
    ///
    /// [`BuildError::InvalidBaseUrl`] when it is not an absolute `http(s)` URL with a host,
    /// or carries user info, a query or a fragment.
    pub fn parse(text: &str) -> Result<Self, BuildError> {
        let invalid = |why: &str| BuildError::InvalidBaseUrl {
            reason: why.to_owned(),
        };
        let url = Url::parse(text).map_err(|_| invalid("not an absolute URL"))?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(invalid("the scheme must be http or https"));
        }
        if url.host().is_none() {
            return Err(invalid("a host is required"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                "user info is not allowed; credentials come from the vault",
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("a query or fragment is not allowed"));
        }
        Ok(Self(url))
    }

    /// The URL.
    pub fn as_url(&self) -> &Url {
        &self.0
    }

    /// The path prefix without a trailing slash (`""` for the root).
    pub(crate) fn prefix(&self) -> &str {
        self.0.path().trim_end_matches('/')
    }

    /// `scheme://host:port`, for summaries: the URL's text up to its path (a base URL has no
    /// user info, and the URL crate already dropped a default port and punycoded the host,
    /// so this is the origin's ASCII serialization, without building it anew).
    pub(crate) fn origin_text(&self) -> &str {
        &self.0[..url::Position::BeforePath]
    }

    /// Whether the host is a loopback address (`127.0.0.0/8`, `::1`, `localhost`).
    pub(crate) fn is_loopback(&self) -> bool {
        is_loopback(&self.0)
    }

    /// Plain `http` to anything but loopback: no credential may travel there.
    pub(crate) fn is_plain_http_off_loopback(&self) -> bool {
        self.0.scheme() == "http" && !self.is_loopback()
    }

    /// The full URL for an already-encoded path (starting with `/`).
    pub(crate) fn join(&self, encoded_path: &str) -> Url {
        let mut url = self.0.clone();
        let prefix = self.prefix();
        if prefix.is_empty() {
            url.set_path(encoded_path);
        } else {
            url.set_path(&[prefix, encoded_path].concat());
        }
        url
    }
}

pub(crate) fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// How the idempotency key is written in its header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyQuoting {
    /// As a structured-field string, `"…"`, as the IETF Idempotency-Key draft specifies.
    #[default]
    Quoted,
    /// The bare key, as many APIs expect.
    Bare,
}

/// The per-call limits; an action's `HttpTarget` may override each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) connect_timeout: Duration,
    pub(crate) total_timeout: Duration,
    pub(crate) max_response_bytes: u64,
    pub(crate) max_retry_after: Duration,
    pub(crate) max_attempts: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            total_timeout: Duration::from_secs(30),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_retry_after: Duration::from_secs(60),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }
}

/// Default cap on a response body: 1 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 1 << 20;
/// Default most requests per attempt.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// No attempt ever sends more than this many requests, whatever an action declares.
pub const HARD_MAX_ATTEMPTS: u32 = 5;

/// Exponential backoff with jitter between resends that the upstream gave no delay for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub(crate) base: Duration,
    pub(crate) max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(200),
            max: Duration::from_secs(5),
        }
    }
}

impl Backoff {
    /// The wait before resend number `resend` (1 for the first resend): `base * 2^(n-1)`,
    /// capped at `max`, with "equal jitter" (uniform in the upper half).
    pub(crate) fn wait(self, resend: u32) -> Duration {
        let factor = 1u32 << resend.saturating_sub(1).min(16);
        let full = self.base.saturating_mul(factor).min(self.max);
        let half = full / 2;
        let jitter_ns = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(fastrand::u64(0..=jitter_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_refuses_user_info_query_and_other_schemes() {
        assert!(BaseUrl::parse("https://u:p@api.example.com").is_err());
        assert!(BaseUrl::parse("https://api.example.com/?a=1").is_err());
        assert!(BaseUrl::parse("ftp://api.example.com").is_err());
        assert!(BaseUrl::parse("https://api.example.com/v1/").is_ok());
    }

    #[test]
    fn join_keeps_the_prefix_and_the_encoded_path() {
        let b = BaseUrl::parse("https://api.example.com/v1/").unwrap();
        assert_eq!(
            b.join("/p/a%2Fb").as_str(),
            "https://api.example.com/v1/p/a%2Fb"
        );
    }

    #[test]
    fn backoff_doubles_within_jitter_and_caps() {
        let b = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_millis(300),
        };
        for _ in 0..100 {
            let w1 = b.wait(1);
            assert!(w1 >= Duration::from_millis(50) && w1 <= Duration::from_millis(100));
            let w2 = b.wait(2);
            assert!(w2 >= Duration::from_millis(100) && w2 <= Duration::from_millis(200));
            let w5 = b.wait(5);
            assert!(w5 >= Duration::from_millis(150) && w5 <= Duration::from_millis(300));
        }
    }

    #[test]
    fn origin_text_is_the_origins_ascii_serialization() {
        for text in [
            "https://api.example.com/v1/",
            "https://API.Example.com:443/",
            "http://127.0.0.1:8080",
            "http://[::1]:8080/x",
            "https://bücher.example:8443/a/b",
            "http://localhost",
        ] {
            let base = BaseUrl::parse(text).unwrap();
            assert_eq!(
                base.origin_text(),
                base.as_url().origin().ascii_serialization(),
                "{text}"
            );
        }
    }

    #[test]
    fn loopback_hosts_are_recognised() {
        assert!(
            BaseUrl::parse("http://127.0.0.1:8080")
                .unwrap()
                .is_loopback()
        );
        assert!(BaseUrl::parse("http://[::1]:8080").unwrap().is_loopback());
        assert!(BaseUrl::parse("http://localhost").unwrap().is_loopback());
        assert!(!BaseUrl::parse("http://10.0.0.1").unwrap().is_loopback());
    }
}
