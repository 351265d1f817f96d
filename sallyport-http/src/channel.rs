//! [`HttpChannel`]: the `http` channel, its builder and the dispatch loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderName, HeaderValue};
use sallyport_core::Catalog;
use sallyport_core::RetryRule;
use sallyport_core::action::ActionSpec;
use sallyport_core::after_send::Failure;
use sallyport_core::channel::{
    CallView, Channel, ChannelOutcome, Dispatch, DispatchContext, PreparedRequest,
};
use sallyport_core::code::UpstreamCode;
use sallyport_core::drift::DriftMode;
use sallyport_core::drift::openapi::{OpenApi, OutgoingRequest};
use sallyport_core::outcome::{Origin, Refusal, RefusalCode, Status};
use sallyport_core::target::{HttpTarget, Target};
use sallyport_core::vault::{Credential, CredentialMeta};
use serde_json::Value;

use crate::config::{Backoff, BaseUrl, HARD_MAX_ATTEMPTS, KeyQuoting, Limits};
use crate::credential;
use crate::error::BuildError;
use crate::exchange::{Exchange, LostKind, SendHook, exchange};
use crate::openapi::{ActionRoute, OpenApiGuards, routes};
use crate::prepared::{self, HttpPrepared};
use crate::request::{self, BuildRequest, Builders, HttpRequest, RequestPlan, Typed};
use crate::response::{self, Call, Step};

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
    pool_idle_timeout: Duration,
    /// The upstream's OpenAPI document, the drift mode its checks run in, and one compiled
    /// operation guard per action.
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

/// Builds an [`HttpChannel`]. Setters never fail; [`HttpChannelBuilder::build`] reports
/// what is wrong.
#[must_use]
pub struct HttpChannelBuilder {
    base_url: Option<String>,
    action_base_urls: Vec<(String, String)>,
    builders: Builders,
    limits: Limits,
    backoff: Backoff,
    idempotency_header: String,
    quoting: KeyQuoting,
    user_agent: String,
    root_certificates: Vec<Vec<u8>>,
    pool_idle_timeout: Duration,
    openapi: Option<(Arc<OpenApi>, DriftMode)>,
    /// The HTTP actions whose OpenAPI guards `build()` compiles.
    routes: Vec<ActionRoute>,
}

impl std::fmt::Debug for HttpChannelBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpChannelBuilder")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl Default for HttpChannelBuilder {
    fn default() -> Self {
        Self {
            base_url: None,
            action_base_urls: Vec::new(),
            builders: HashMap::new(),
            limits: Limits::default(),
            backoff: Backoff::default(),
            idempotency_header: "Idempotency-Key".to_owned(),
            quoting: KeyQuoting::default(),
            user_agent: concat!("sallyport-http/", env!("CARGO_PKG_VERSION")).to_owned(),
            root_certificates: Vec::new(),
            pool_idle_timeout: Duration::from_secs(60),
            openapi: None,
            routes: Vec::new(),
        }
    }
}

impl HttpChannelBuilder {
    /// The base URL every action's path is appended to (unless the action has its own, or
    /// it binds a credential and this is not set: then the credential's bound URL is used).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    /// A base URL for one action.
    pub fn action_base_url(mut self, action: impl Into<String>, url: impl Into<String>) -> Self {
        self.action_base_urls.push((action.into(), url.into()));
        self
    }

    /// Registers a hand-written request builder for `action` (whose `HttpTarget` says
    /// `custom_request`).
    pub fn request_builder(
        mut self,
        action: impl Into<String>,
        builder: impl BuildRequest,
    ) -> Self {
        self.builders.insert(action.into(), Arc::new(builder));
        self
    }

    /// Registers the typed hand-written request of action `A`.
    pub fn request_for<A: HttpRequest>(mut self) -> Self {
        self.builders
            .insert(A::spec().name.into_owned(), Arc::new(Typed::<A>::new()));
        self
    }

    /// Default connect timeout (10 s); an action may set its own.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.limits.connect_timeout = timeout;
        self
    }

    /// Default total timeout of one request, body included (30 s); an action may set its own.
    pub fn total_timeout(mut self, timeout: Duration) -> Self {
        self.limits.total_timeout = timeout;
        self
    }

    /// Default cap on a response body (1 MiB); an action may set its own.
    pub fn max_response_bytes(mut self, bytes: u64) -> Self {
        self.limits.max_response_bytes = bytes;
        self
    }

    /// Default longest `Retry-After` honoured (60 s); an action may set its own.
    pub fn max_retry_after(mut self, wait: Duration) -> Self {
        self.limits.max_retry_after = wait;
        self
    }

    /// Default most requests per attempt (3; never more than 5).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.limits.max_attempts = attempts;
        self
    }

    /// Exponential backoff between resends the upstream gave no delay for: the first wait
    /// is between `base / 2` and `base`, doubling up to `max` (defaults 200 ms, 5 s).
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff = Backoff { base, max };
        self
    }

    /// The header that carries the idempotency key, and how the key is written (default
    /// `Idempotency-Key`, quoted as the IETF draft's structured-field string).
    pub fn idempotency_header(mut self, name: impl Into<String>, quoting: KeyQuoting) -> Self {
        self.idempotency_header = name.into();
        self.quoting = quoting;
        self
    }

    /// The `User-Agent` sent.
    pub fn user_agent(mut self, agent: impl Into<String>) -> Self {
        self.user_agent = agent.into();
        self
    }

    /// Trusts an extra root certificate (DER), in addition to the platform's roots (a
    /// staging upstream with a private CA).
    pub fn add_root_certificate(mut self, der: impl Into<Vec<u8>>) -> Self {
        self.root_certificates.push(der.into());
        self
    }

    /// How long an idle pooled connection is kept (60 s).
    pub fn pool_idle_timeout(mut self, timeout: Duration) -> Self {
        self.pool_idle_timeout = timeout;
        self
    }

    /// Attaches the upstream's OpenAPI document: before consent, every request is checked
    /// against its operation (found by method and path template) — path, query and header
    /// parameters and the JSON body, `$ref`s resolved — in `mode`. In `strict` mode a request
    /// that diverges, or an action with no operation in the document, is refused with
    /// `invalid_request` and the divergences; `warn` logs and sends; `shadow` sends. Register
    /// the document's hash as the actions' provenance
    /// (`CatalogBuilder::upstream_spec::<A>(openapi.hash())`) so a changed spec shows as
    /// definition drift.
    ///
    /// Give the channel its catalog too ([`HttpChannelBuilder::catalog`]) so that every
    /// action's operation guard is compiled in [`build`](Self::build), and a document that
    /// cannot check an action fails there, at start-up, rather than at the action's first call.
    pub fn openapi(mut self, document: OpenApi, mode: DriftMode) -> Self {
        self.openapi = Some((Arc::new(document), mode));
        self
    }

    /// The catalog whose HTTP actions this channel will send. With an OpenAPI document
    /// attached ([`HttpChannelBuilder::openapi`]), [`build`](Self::build) compiles the
    /// operation guard of each of these actions, so the first call does not wait for it and a
    /// guard that cannot be compiled is reported at start-up. Actions not named here still
    /// have their guard compiled on their first call.
    pub fn catalog(mut self, catalog: &Catalog) -> Self {
        self.routes.extend(routes(catalog));
        self
    }

    /// Builds the channel.
    ///
    /// # Errors
    ///
    /// [`BuildError`] for an unusable base URL, idempotency header, limit or TLS setup;
    /// [`BuildError::OpenApi`] for an action of the [catalog](Self::catalog) whose operation
    /// guard cannot be compiled from the attached document (in `strict` mode also for an
    /// action with no operation in it).
    pub fn build(self) -> Result<HttpChannel, BuildError> {
        let base_url = self.base_url.as_deref().map(BaseUrl::parse).transpose()?;
        let mut action_base_urls = HashMap::new();
        for (action, url) in &self.action_base_urls {
            action_base_urls.insert(action.clone(), BaseUrl::parse(url)?);
        }
        let idempotency_header = HeaderName::from_bytes(self.idempotency_header.as_bytes())
            .map_err(|_| BuildError::InvalidIdempotencyHeader(self.idempotency_header.clone()))?;
        if request::header_name(idempotency_header.as_str(), &[]).is_err() {
            return Err(BuildError::InvalidIdempotencyHeader(
                self.idempotency_header,
            ));
        }
        if self.limits.max_attempts == 0 || self.limits.max_attempts > HARD_MAX_ATTEMPTS {
            return Err(BuildError::InvalidLimit(
                "max_attempts must be between 1 and 5",
            ));
        }
        if self.limits.total_timeout.is_zero() || self.limits.connect_timeout.is_zero() {
            return Err(BuildError::InvalidLimit("timeouts must be positive"));
        }
        let user_agent = HeaderValue::from_str(&self.user_agent)
            .map_err(|_| BuildError::InvalidLimit("the user agent is not a valid header value"))?;
        let tls = tls_config(&self.root_certificates)?;
        let openapi = self
            .openapi
            .map(|(document, mode)| OpenApiGuards::compile(document, mode, &self.routes))
            .transpose()?;
        let channel = HttpChannel {
            inner: Arc::new(Inner {
                base_url,
                action_base_urls,
                builders: self.builders,
                limits: self.limits,
                backoff: self.backoff,
                idempotency_header,
                quoting: self.quoting,
                user_agent,
                tls,
                clients: Mutex::new(HashMap::new()),
                pool_idle_timeout: self.pool_idle_timeout,
                openapi,
            }),
        };
        // Build the default client now, so a broken setup fails here, not on the first call.
        channel.client(channel.inner.limits.connect_timeout)?;
        Ok(channel)
    }
}

fn tls_config(roots: &[Vec<u8>]) -> Result<rustls::ClientConfig, BuildError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = if roots.is_empty() {
        rustls_platform_verifier::Verifier::new(Arc::clone(&provider)).map_err(BuildError::Tls)?
    } else {
        let extra = roots
            .iter()
            .map(|der| rustls::pki_types::CertificateDer::from(der.clone()));
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra, Arc::clone(&provider))
            .map_err(BuildError::Tls)?
    };
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(BuildError::Tls)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

impl HttpChannel {
    /// Checks the planned request against the attached OpenAPI operation (before consent).
    fn check_openapi(
        &self,
        spec: &ActionSpec,
        target: &HttpTarget,
        plan: &RequestPlan,
    ) -> Result<(), Refusal> {
        let Some(openapi) = &self.inner.openapi else {
            return Ok(());
        };
        let Some(guard) = openapi.guard(spec.name.as_ref(), target)? else {
            return Ok(());
        };
        // Headers the channel attaches at dispatch count as present: the idempotency key
        // (a placeholder of the same shape) and the credential.
        let mut headers: Vec<(String, String)> = plan
            .headers
            .iter()
            .filter_map(|(n, v)| {
                v.to_str()
                    .ok()
                    .map(|v| (n.as_str().to_owned(), v.to_owned()))
            })
            .collect();
        if spec.retry == RetryRule::IdempotencyKey {
            headers.push((
                self.inner.idempotency_header.as_str().to_owned(),
                "00000000-0000-4000-8000-000000000000".to_owned(),
            ));
        }
        let body: Option<Value> = match plan.body.as_deref() {
            Some(bytes) => Some(serde_json::from_slice(bytes).map_err(|_| {
                Refusal::new(RefusalCode::InvalidRequest, "the request body is not JSON")
            })?),
            None => None,
        };
        let path = plan.path.split('?').next().unwrap_or(&plan.path);
        let mut request = OutgoingRequest::new(plan.method.as_str(), path)
            .with_query(&plan.query)
            .with_headers(&headers);
        if let Some(body) = &body {
            request = request.with_body(body);
        }
        let decision = guard.check(openapi.mode(), &request);
        if decision.allowed {
            Ok(())
        } else {
            Err(Refusal::new(
                RefusalCode::InvalidRequest,
                format!(
                    "the request does not match the upstream's API: {}",
                    decision.detail
                ),
            )
            .with_divergences(decision.divergences))
        }
    }

    /// A builder.
    pub fn builder() -> HttpChannelBuilder {
        HttpChannelBuilder::default()
    }

    /// The reqwest client the channel uses for `connect_timeout`: no redirects, no proxy,
    /// no hidden retries, `TCP_NODELAY`, keep-alive pooling, HTTP/1.1, no decompression.
    /// Exposed so benchmarks can compare against the very same client settings.
    ///
    /// # Errors
    ///
    /// [`BuildError::Client`] when reqwest cannot build it.
    pub fn client(&self, connect_timeout: Duration) -> Result<reqwest::Client, BuildError> {
        let mut clients = self
            .inner
            .clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = clients.get(&connect_timeout) {
            return Ok(client.clone());
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .no_proxy()
            .tcp_nodelay(true)
            .connect_timeout(connect_timeout)
            .pool_idle_timeout(self.inner.pool_idle_timeout)
            .http1_only()
            .referer(false)
            .tls_backend_preconfigured(self.inner.tls.clone())
            .build()
            .map_err(|e| BuildError::Client(e.without_url()))?;
        clients.insert(connect_timeout, client.clone());
        Ok(client)
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
        self.check_openapi(spec, target, &plan)?;
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

    async fn run(&self, call: &Dispatch<'_>) -> ChannelOutcome {
        let Some(prepared) = call.prepared::<HttpPrepared>() else {
            return refused(&Refusal::new(
                RefusalCode::ChannelUnavailable,
                "the request was not prepared by the HTTP channel; nothing was sent",
            ));
        };
        let Some(url) = prepared.destination() else {
            return refused(&prepared::incomplete());
        };
        let target = match http_target(call.spec) {
            Ok(target) => target,
            Err(refusal) => return refused(&refusal),
        };
        let mut headers = prepared.headers.clone();
        if call.spec.retry == RetryRule::IdempotencyKey {
            match self.idempotency_value(call.idempotency_key.as_str()) {
                Ok(value) => {
                    headers.insert(self.inner.idempotency_header.clone(), value);
                }
                Err(refusal) => return refused(&refusal),
            }
        }
        let client = match self.client(prepared.limits.connect_timeout) {
            Ok(c) => c,
            Err(_) => {
                return refused(&Refusal::new(
                    RefusalCode::ChannelUnavailable,
                    "the HTTP client could not be set up",
                ));
            }
        };
        let limits = prepared.limits;
        let header_name = self.inner.idempotency_header.as_str().to_owned();
        let attempt_id = call.attempt_id.to_string();
        let mut sent_before = false;
        let mut last: Option<ChannelOutcome> = None;
        for attempt in 1..=limits.max_attempts {
            let hook = SendHook::new(Some(Arc::clone(call.context)));
            let request = prepared.request(url, &headers, &hook);
            let result = exchange(
                &client,
                request,
                &hook,
                limits.total_timeout,
                limits.max_response_bytes,
            )
            .await;
            let mapping = Call {
                spec: call.spec,
                target,
                max_retry_after: limits.max_retry_after,
                resend: sent_before,
                credential_attached: call.credential.is_some(),
                idempotency_header: &header_name,
                attempt_id: &attempt_id,
                scrubber: call.context.scrubber(),
            };
            let step = step_for(&mapping, result, sent_before || hook.fired());
            sent_before |= hook.fired();
            match step {
                Step::Done(outcome) => return outcome,
                Step::Resend { wait, exhausted } => {
                    if attempt == limits.max_attempts {
                        return exhausted;
                    }
                    let wait = wait.unwrap_or_else(|| self.inner.backoff.wait(attempt));
                    tracing::debug!(attempt, wait_ms = wait.as_millis() as u64, "resending");
                    last = Some(exhausted);
                    tokio::time::sleep(wait).await;
                }
            }
        }
        last.unwrap_or_else(|| {
            ChannelOutcome::new(Status::Rejected).with_code(UpstreamCode::NotSent)
        })
    }
}

/// How one exchange continues the attempt. What a failed exchange means is decided by the
/// rules every channel shares ([`AfterSend`](sallyport_core::after_send::AfterSend)); this only says what happened and whether to
/// resend.
fn step_for(call: &Call<'_>, result: Exchange, any_sent: bool) -> Step {
    let rules = call.after_send();
    match result {
        Exchange::Refused(outcome) => Step::Done(outcome),
        Exchange::Answered(answer) => response::classify(call, &answer),
        // A certificate this executor does not trust stays untrusted on a resend.
        Exchange::Untrusted => Step::Done(rules.failed(
            Failure::Untrusted,
            any_sent,
            if any_sent {
                "the upstream's certificate was refused"
            } else {
                "the upstream's certificate is not trusted by this executor"
            },
        )),
        // Nothing left: always safe to resend. When exhausted, the truth depends on whether
        // an earlier request of this attempt left.
        Exchange::NotSent { timed_out } => Step::Resend {
            wait: None,
            exhausted: rules.failed(
                if timed_out {
                    Failure::ConnectTimedOut
                } else {
                    Failure::ConnectFailed
                },
                any_sent,
                if any_sent {
                    "the upstream became unreachable"
                } else {
                    "the upstream could not be reached"
                },
            ),
        },
        Exchange::Lost { kind, status } => {
            let (failure, what) = match (kind, status) {
                (LostKind::Timeout, _) => (
                    Failure::TimedOut,
                    "the request was sent and no complete answer came within the timeout"
                        .to_owned(),
                ),
                (LostKind::Connection, Some(s)) => (
                    Failure::CutOff,
                    format!(
                        "the request was sent and the answer (HTTP {}) was cut off",
                        s.as_u16()
                    ),
                ),
                (LostKind::Connection, None) => (
                    Failure::ConnectionLost,
                    "the request was sent and the connection was lost before an answer".to_owned(),
                ),
            };
            let mut outcome = rules.failed(failure, any_sent, &what);
            if let Some(s) = status {
                outcome = outcome.with_upstream_status(i64::from(s.as_u16()));
            }
            if call.may_resend_after_send() {
                Step::Resend {
                    wait: None,
                    exhausted: outcome,
                }
            } else {
                Step::Done(outcome)
            }
        }
    }
}

/// A refusal found at dispatch (nothing sent).
fn refused(refusal: &Refusal) -> ChannelOutcome {
    ChannelOutcome::new(Status::Rejected)
        .with_origin(Origin::Executor)
        .with_code(refusal.code)
        .with_reason(refusal.reason.clone())
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

/// Used by the probe: one bare exchange with a fresh hook and no journal.
pub(crate) async fn probe_exchange(
    channel: &HttpChannel,
    prepared: &HttpPrepared,
) -> Option<crate::exchange::Answer> {
    let client = channel.client(prepared.limits.connect_timeout).ok()?;
    let url = prepared.destination()?;
    let hook = SendHook::new(None::<Arc<DispatchContext>>);
    match exchange(
        &client,
        prepared.request(url, &prepared.headers, &hook),
        &hook,
        prepared.limits.total_timeout,
        prepared.limits.max_response_bytes,
    )
    .await
    {
        Exchange::Answered(answer) => Some(answer),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
