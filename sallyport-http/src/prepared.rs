//! [`HttpPrepared`]: the one request of a call, built once at stage 4 and bound to the
//! credential at stage 6; consent shows it, the intent fingerprints it, dispatch sends it
//! (every resend a byte-identical copy plus the same idempotency key).

use std::fmt;
use std::sync::Arc;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use sallyport_core::channel::{PreparedRequest, RequestSummary, fingerprint};
use sallyport_core::code::RefusalCode;
use sallyport_core::outcome::Refusal;
use sallyport_core::vault::Credential;
use url::Url;

use crate::config::{BaseUrl, Limits};
use crate::credential::{self, Injection};
use crate::exchange::{HookedBody, SendHook};
use crate::request::RequestPlan;

/// The request of one call.
#[derive(Clone)]
pub(crate) struct HttpPrepared {
    pub(crate) limits: Limits,
    pub(crate) plan: RequestPlan,
    /// The base URL the channel configures for the action, if any.
    configured: Option<BaseUrl>,
    /// The credential the action binds, until [`PreparedRequest::bind`] attached it.
    unbound: Option<String>,
    /// The base the request goes to: known at once without a credential, from the
    /// credential's binding otherwise.
    base: Option<BaseUrl>,
    /// The full URL, credential query parameter included once bound.
    pub(crate) url: Option<Url>,
    /// Every header, the credential's included once bound.
    pub(crate) headers: HeaderMap,
    /// The fingerprint, computed when the destination became known (before the credential
    /// was attached, so it covers no secret).
    fingerprint: Option<[u8; 32]>,
}

impl fmt::Debug for HttpPrepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpPrepared")
            .field("plan", &self.plan)
            .field("base", &self.base.as_ref().map(BaseUrl::origin_text))
            .field("unbound", &self.unbound)
            .finish_non_exhaustive()
    }
}

impl HttpPrepared {
    /// A prepared request for `plan`. Without a credential to bind, `base` is where it goes
    /// and it is complete; with one, [`PreparedRequest::bind`] completes it.
    pub(crate) fn new(
        limits: Limits,
        plan: RequestPlan,
        configured: Option<BaseUrl>,
        credential: Option<String>,
        user_agent: HeaderValue,
    ) -> Self {
        let mut headers = HeaderMap::with_capacity(plan.headers.len() + 5);
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        headers.insert(reqwest::header::USER_AGENT, user_agent);
        if plan.body.is_some() {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        for (name, value) in &plan.headers {
            headers.append(name.clone(), value.clone());
        }
        let mut prepared = Self {
            limits,
            plan,
            configured,
            unbound: credential,
            base: None,
            url: None,
            headers,
            fingerprint: None,
        };
        if prepared.unbound.is_none()
            && let Some(base) = prepared.configured.clone()
        {
            prepared.complete(base, None);
        }
        prepared
    }

    /// Fixes the destination, fingerprints the request, then attaches the credential.
    fn complete(&mut self, base: BaseUrl, injection: Option<Injection>) {
        let mut url = base.join(&self.plan.path);
        if !self.plan.query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in &self.plan.query {
                pairs.append_pair(k, v);
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        self.fingerprint = Some(self.fingerprint_of(url.as_str()));
        match injection {
            Some(Injection::Query(k, v)) => {
                url.query_pairs_mut().append_pair(&k, &v);
            }
            Some(Injection::Header(name, value)) => {
                self.headers.insert(name, value);
            }
            // An OAuth token is attached by the attempt loop at each send; a client
            // certificate by the credential's own client, in the TLS handshake.
            Some(Injection::AtSend | Injection::Handshake) | None => {}
        }
        self.url = Some(url);
        self.base = Some(base);
        self.unbound = None;
    }

    fn fingerprint_of(&self, url: &str) -> [u8; 32] {
        let method = self.plan.method.as_str().as_bytes();
        let headers = self
            .headers
            .iter()
            .flat_map(|(n, v)| [n.as_str().as_bytes(), v.as_bytes()]);
        let body = self.plan.body.as_deref().unwrap_or_default();
        fingerprint(
            [method, url.as_bytes()]
                .into_iter()
                .chain(headers)
                .chain([body]),
        )
    }

    /// The URL to send to; `None` while a credential the action binds is not attached.
    pub(crate) fn destination(&self) -> Option<&Url> {
        self.url.as_ref()
    }

    /// The request for one send, with `headers` (the prepared ones, plus the idempotency
    /// key when the action carries one) and a fresh body whose first poll counts the send.
    pub(crate) fn request(
        &self,
        url: &Url,
        headers: &HeaderMap,
        hook: &Arc<SendHook>,
    ) -> reqwest::Request {
        let mut request = reqwest::Request::new(self.plan.method.clone(), url.clone());
        *request.headers_mut() = headers.clone();
        *request.body_mut() = Some(reqwest::Body::wrap(HookedBody::new(
            self.plan.body.clone(),
            Arc::clone(hook),
        )));
        request
    }
}

impl PreparedRequest for HttpPrepared {
    fn bind(&mut self, credential: &Credential) -> Result<(), Refusal> {
        let meta = credential.meta();
        let base = credential::base_for(self.configured.as_ref(), meta)?;
        credential::check(meta, &base, Some(&self.plan))?;
        // The binding covers the URL the request goes to, not only the base it starts from.
        credential::check_destination(meta, &base.join(&self.plan.path))?;
        let injection = credential::injection(credential)?;
        self.complete(base, Some(injection));
        Ok(())
    }

    fn summary(&self) -> RequestSummary {
        let placeholder;
        let origin = match (&self.base, &self.unbound) {
            (Some(base), _) => [base.origin_text(), base.prefix()],
            (None, Some(name)) => match &self.configured {
                Some(base) => [base.origin_text(), base.prefix()],
                None => {
                    placeholder = format!("<base URL of credential `{name}`>");
                    [placeholder.as_str(), ""]
                }
            },
            (None, None) => ["<no base URL>", ""],
        };
        RequestSummary(self.plan.summary(origin))
    }

    fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint.unwrap_or_else(|| self.fingerprint_of(""))
    }
}

/// A refusal for a request that reached dispatch incomplete: a bug, never sent.
pub(crate) fn incomplete() -> Refusal {
    Refusal::new(
        RefusalCode::CredentialUnavailable,
        "the request's credential was not attached before dispatch; nothing was sent",
    )
}
