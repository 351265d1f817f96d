//! [`HttpChannel`]: the `http` channel and the request it prepares. Its builder, TLS and
//! clients, and the attempt loop live in the submodules.

mod attempt;
mod builder;
pub mod oauth;
mod tls;

pub(crate) use self::attempt::probe_exchange;
pub use self::builder::HttpChannelBuilder;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderName, HeaderValue};
use sallyport_core::action::ActionSpec;
use sallyport_core::channel::{CallView, Channel, ChannelOutcome, Dispatch, PreparedRequest};
use sallyport_core::code::RefusalCode;
use sallyport_core::outcome::Refusal;
use sallyport_core::target::{HttpTarget, Target};
use sallyport_core::vault::{Credential, CredentialMeta};
use serde_json::Value;

use crate::config::{Backoff, BaseUrl, HARD_MAX_ATTEMPTS, KeyQuoting, Limits};
use crate::credential;
#[cfg(feature = "openapi")]
use crate::openapi::OpenApiGuards;
use crate::prepared::HttpPrepared;
use crate::request::{self, Builders};

/// The HTTP channel: turns an authorized attempt into exactly one request, or a bounded,
/// truthful series of resends with the same idempotency key and payload, and the answer
/// into one of the five statuses.
///
/// Cheap to clone; one per process is enough (it pools connections).
#[derive(Clone)]
pub struct HttpChannel {
    inner: Arc<Inner>,
}

struct Inner {
    base_url: Option<BaseUrl>,
    action_base_urls: HashMap<String, BaseUrl>,
    builders: Builders,
    limits: Limits,
    backoff: Backoff,
    idempotency_header: HeaderName,
    quoting: KeyQuoting,
    user_agent: HeaderValue,
    tls: rustls::ClientConfig,
    /// One client per connect timeout in use (reqwest sets it per client).
    clients: Mutex<HashMap<Duration, reqwest::Client>>,
    /// Each client certificate credential's own clients.
    cert_clients: Mutex<tls::CertClientMap>,
    pool_idle_timeout: Duration,
    /// How long a token endpoint may take.
    token_timeout: Duration,
    /// One OAuth refresh at a time per credential.
    refreshing: oauth::RefreshLocks,
    /// The upstream's OpenAPI document, the drift mode its checks run in, and one compiled
    /// operation guard per action.
    #[cfg(feature = "openapi")]
    openapi: Option<OpenApiGuards>,
}

impl std::fmt::Debug for HttpChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpChannel")
            .field(
                "base_url",
                &self.inner.base_url.as_ref().map(BaseUrl::as_url),
            )
            .field(
                "actions_with_base_url",
                &self.inner.action_base_urls.keys().collect::<Vec<_>>(),
            )
            .field(
                "request_builders",
                &self.inner.builders.keys().collect::<Vec<_>>(),
            )
            .field("idempotency_header", &self.inner.idempotency_header)
            .finish_non_exhaustive()
    }
}

impl HttpChannel {
    /// A builder.
    pub fn builder() -> HttpChannelBuilder {
        HttpChannelBuilder::default()
    }

    /// The channel-wide base URL, if one is configured.
    pub(crate) fn default_base(&self) -> Option<&BaseUrl> {
        self.inner.base_url.as_ref()
    }

    /// The channel-wide connect timeout.
    pub(crate) fn default_connect_timeout(&self) -> Duration {
        self.inner.limits.connect_timeout
    }

    /// The channel-wide total timeout.
    pub(crate) fn default_total_timeout(&self) -> Duration {
        self.inner.limits.total_timeout
    }

    fn configured_base(&self, spec: &ActionSpec) -> Option<&BaseUrl> {
        self.inner
            .action_base_urls
            .get(spec.name.as_ref())
            .or(self.inner.base_url.as_ref())
    }

    fn limits(&self, target: &HttpTarget) -> Limits {
        let d = self.inner.limits;
        Limits {
            connect_timeout: target
                .connect_timeout_ms
                .map_or(d.connect_timeout, Duration::from_millis),
            total_timeout: target
                .total_timeout_ms
                .map_or(d.total_timeout, Duration::from_millis),
            max_response_bytes: target.max_response_bytes.unwrap_or(d.max_response_bytes),
            max_retry_after: target
                .max_retry_after_s
                .map_or(d.max_retry_after, Duration::from_secs),
            max_attempts: target
                .max_attempts
                .unwrap_or(d.max_attempts)
                .clamp(1, HARD_MAX_ATTEMPTS),
        }
    }

    fn owned_headers(&self, credential: Option<&CredentialMeta>) -> Vec<HeaderName> {
        let mut owned = vec![self.inner.idempotency_header.clone()];
        if let Some(h) = credential.and_then(credential::owned_header) {
            owned.push(h);
        }
        owned
    }

    /// Builds the call's request: the plan (a hand-written builder runs here, once), the
    /// OpenAPI check, and the destination when no credential is to be bound.
    pub(crate) fn prepare_request(
        &self,
        spec: &ActionSpec,
        arguments: &Value,
        input: &(dyn std::any::Any + Send + Sync),
    ) -> Result<HttpPrepared, Refusal> {
        let target = http_target(spec)?;
        let plan = request::plan(
            spec,
            target,
            arguments,
            input,
            &self.inner.builders,
            &self.owned_headers(None),
        )?;
        #[cfg(feature = "openapi")]
        if let Some(guards) = &self.inner.openapi {
            guards.check_request(spec, target, &plan, &self.inner.idempotency_header)?;
        }
        let configured = self.configured_base(spec);
        match (&spec.credential, configured) {
            (Some(name), Some(base)) if base.is_plain_http_off_loopback() => {
                return Err(Refusal::new(
                    RefusalCode::CredentialUnavailable,
                    format!(
                        "credential `{name}` would travel over plain HTTP; only HTTPS (or loopback) may carry credentials"
                    ),
                ));
            }
            (None, _) => {
                no_base(spec, configured)?;
            }
            (Some(_), _) => {}
        }
        Ok(HttpPrepared::new(
            self.limits(target),
            plan,
            configured.cloned(),
            spec.credential.as_ref().map(|c| c.to_string()),
            self.inner.user_agent.clone(),
        ))
    }

    /// The whole request for a call, credential attached: for the probe, outside the
    /// executor.
    pub(crate) fn assemble(
        &self,
        spec: &ActionSpec,
        arguments: &Value,
        input: &(dyn std::any::Any + Send + Sync),
        credential: Option<&Credential>,
    ) -> Result<HttpPrepared, Refusal> {
        let mut prepared = self.prepare_request(spec, arguments, input)?;
        match (&spec.credential, credential) {
            (Some(name), None) => Err(Refusal::new(
                RefusalCode::CredentialUnavailable,
                format!("credential `{name}` was not resolved"),
            )),
            (_, Some(credential)) => {
                prepared.bind(credential)?;
                Ok(prepared)
            }
            (None, None) => Ok(prepared),
        }
    }

    pub(crate) fn idempotency_value(&self, key: &str) -> Result<HeaderValue, Refusal> {
        let text = match self.inner.quoting {
            KeyQuoting::Quoted => format!("\"{key}\""),
            KeyQuoting::Bare => key.to_owned(),
        };
        HeaderValue::from_str(&text).map_err(|_| {
            Refusal::new(
                RefusalCode::InvalidRequest,
                "the idempotency key is not a valid header value",
            )
        })
    }

    pub(crate) fn idempotency_header(&self) -> &HeaderName {
        &self.inner.idempotency_header
    }
}

fn http_target(spec: &ActionSpec) -> Result<&HttpTarget, Refusal> {
    match &spec.target {
        Target::Http(t) => Ok(t),
        _ => Err(Refusal::new(
            RefusalCode::ChannelUnavailable,
            format!("action `{}` is not an HTTP action", spec.name),
        )),
    }
}

fn no_base(spec: &ActionSpec, configured: Option<&BaseUrl>) -> Result<BaseUrl, Refusal> {
    configured.cloned().ok_or_else(|| {
        Refusal::new(
            RefusalCode::ChannelUnavailable,
            format!(
                "the HTTP channel has no base URL for action `{}`",
                spec.name
            ),
        )
    })
}

#[async_trait]
impl Channel for HttpChannel {
    fn name(&self) -> &str {
        "http"
    }

    fn prepare(&self, call: &CallView<'_>) -> Result<Box<dyn PreparedRequest>, Refusal> {
        let prepared = self.prepare_request(call.spec, call.arguments, call.input)?;
        Ok(Box::new(prepared))
    }

    async fn dispatch(&self, call: Dispatch<'_>) -> ChannelOutcome {
        self.run(&call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BuildError;
    use sallyport_core::target::HttpMethod;

    #[test]
    fn an_action_cannot_raise_its_attempts_above_the_hard_limit_of_five() {
        let channel = HttpChannel::builder().build().unwrap();
        let t = HttpTarget::new(HttpMethod::Get, "/x").with_max_attempts(9);
        assert_eq!(channel.limits(&t).max_attempts, HARD_MAX_ATTEMPTS);
        let t = HttpTarget::new(HttpMethod::Get, "/x");
        assert_eq!(channel.limits(&t).max_attempts, 3);
        assert!(HttpChannel::builder().max_attempts(6).build().is_err());
    }

    #[test]
    fn per_action_limits_override_the_channel_defaults() {
        let channel = HttpChannel::builder().build().unwrap();
        let t = HttpTarget::new(HttpMethod::Get, "/x")
            .with_total_timeout(Duration::from_millis(1500))
            .with_connect_timeout(Duration::from_millis(250))
            .with_max_response_bytes(4096)
            .with_max_retry_after(Duration::from_secs(5));
        let l = channel.limits(&t);
        assert_eq!(l.total_timeout, Duration::from_millis(1500));
        assert_eq!(l.connect_timeout, Duration::from_millis(250));
        assert_eq!(l.max_response_bytes, 4096);
        assert_eq!(l.max_retry_after, Duration::from_secs(5));
        let d = channel.limits(&HttpTarget::new(HttpMethod::Get, "/x"));
        assert_eq!(d.max_response_bytes, 1 << 20);
    }

    #[test]
    fn the_owned_idempotency_header_cannot_be_a_header_the_executor_owns() {
        assert!(matches!(
            HttpChannel::builder()
                .idempotency_header("Authorization", KeyQuoting::Bare)
                .build(),
            Err(BuildError::InvalidIdempotencyHeader(_))
        ));
    }
}
