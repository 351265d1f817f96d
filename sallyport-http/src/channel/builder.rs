//! [`HttpChannelBuilder`]: the HTTP channel's settings, checked once at build.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
#[cfg(feature = "openapi")]
use sallyport_core::Catalog;
#[cfg(feature = "openapi")]
use sallyport_core::drift::DriftMode;
#[cfg(feature = "openapi")]
use sallyport_openapi::OpenApi;

use super::tls::tls_config;
use super::{HttpChannel, Inner};
use crate::config::{Backoff, BaseUrl, HARD_MAX_ATTEMPTS, KeyQuoting, Limits};
use crate::error::BuildError;
#[cfg(feature = "openapi")]
use crate::openapi::{ActionRoute, OpenApiGuards, routes};
use crate::request::{self, BuildRequest, Builders, HttpRequest, Typed};

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
    token_timeout: Duration,
    #[cfg(feature = "openapi")]
    openapi: Option<(Arc<OpenApi>, DriftMode)>,
    /// The HTTP actions whose OpenAPI guards `build()` compiles.
    #[cfg(feature = "openapi")]
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
            token_timeout: Duration::from_secs(10),
            #[cfg(feature = "openapi")]
            openapi: None,
            #[cfg(feature = "openapi")]
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

    /// How long an OAuth token endpoint may take to answer, connection included (10 s);
    /// a slower one refuses the call with `credential_unavailable`, nothing sent.
    pub fn token_timeout(mut self, timeout: Duration) -> Self {
        self.token_timeout = timeout;
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
    #[cfg(feature = "openapi")]
    #[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
    pub fn openapi(mut self, document: OpenApi, mode: DriftMode) -> Self {
        self.openapi = Some((Arc::new(document), mode));
        self
    }

    /// The catalog whose HTTP actions this channel will send. With an OpenAPI document
    /// attached ([`HttpChannelBuilder::openapi`]), [`build`](Self::build) compiles the
    /// operation guard of each of these actions, so the first call does not wait for it and a
    /// guard that cannot be compiled is reported at start-up. Actions not named here still
    /// have their guard compiled on their first call.
    #[cfg(feature = "openapi")]
    #[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
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
        #[cfg(feature = "openapi")]
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
                cert_clients: Mutex::new(HashMap::new()),
                pool_idle_timeout: self.pool_idle_timeout,
                token_timeout: self.token_timeout,
                refreshing: Mutex::new(HashMap::new()),
                #[cfg(feature = "openapi")]
                openapi,
            }),
        };
        // Build the default client now, so a broken setup fails here, not on the first call.
        channel.client(channel.inner.limits.connect_timeout)?;
        Ok(channel)
    }
}
