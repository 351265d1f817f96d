//! Signing in to the console with OpenID Connect: [`OidcLogin`], the provider's discovery,
//! the code exchange and the ID token's validation.
//!
//! The flow is the authorization code grant with PKCE S256, a `state` and a `nonce`
//! (OpenID Connect Core §3.1). The random values and the S256 challenge are made as
//! `sallyport-http`'s OAuth connect makes them ([`sallyport_http::oauth::random_token`],
//! [`sallyport_http::oauth::code_challenge`]), and the requests go through its HTTP client.
//! What the console keeps of a started login (the nonce, the PKCE verifier) waits in the same
//! server-side store as a started connect, under its `state`, bound to the browser by a
//! cookie and taken at most once.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sallyport_core::vault::Secret;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::connect::store::{CONNECT_TTL, Connects};

mod id_token;

use self::id_token::{Expected, Jwks, validate};

/// The path the provider sends the browser back to, under the console's public URL.
pub(crate) const CALLBACK_PATH: &str = "/login/oidc/callback";

/// How long a request to the provider may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a whole request to the provider may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// The largest answer read from the provider (discovery, keys, tokens).
const MAX_ANSWER: usize = 256 * 1024;

/// Signing in to the console with an organization's OpenID Connect provider (the
/// authorization code grant with PKCE S256, `state` and `nonce`).
///
/// The provider is found at `{issuer}/.well-known/openid-configuration`. The console sends
/// the browser there with the redirect URI `{public_url}/login/oidc/callback` (register it
/// with the provider), exchanges the code, and validates the ID token: its signature with
/// the provider's published keys (RS256 or ES256), its issuer, its audience (the client id),
/// its expiry and its nonce. The session then carries the token's subject, a display name
/// and groups ([`OidcLogin::name_claims`], [`OidcLogin::groups_claim`]), and every decision
/// made in it records them.
///
/// `Debug` never shows the client secret.
///
/// ```
/// use sallyport_console::OidcLogin;
/// let login = OidcLogin::new(
///     "https://id.example.com/realms/ops",
///     "sallyport-console",
///     "https://console.example.com",
/// )
/// .client_secret("from-your-secret-store")
/// .provider_name("Example ID");
/// assert_eq!(login.redirect_uri(), "https://console.example.com/login/oidc/callback");
/// assert!(!format!("{login:?}").contains("from-your-secret-store"));
/// ```
#[derive(Clone)]
#[must_use]
pub struct OidcLogin {
    pub(crate) issuer: String,
    pub(crate) client_id: String,
    client_secret: Option<Arc<Secret>>,
    public_url: String,
    pub(crate) scopes: Vec<String>,
    name_claims: Vec<String>,
    groups_claim: String,
    pub(crate) provider_name: String,
}

impl fmt::Debug for OidcLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OidcLogin")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("confidential", &self.client_secret.is_some())
            .field("redirect_uri", &self.redirect_uri())
            .field("scopes", &self.scopes)
            .field("name_claims", &self.name_claims)
            .field("groups_claim", &self.groups_claim)
            .field("provider_name", &self.provider_name)
            .finish_non_exhaustive()
    }
}

impl OidcLogin {
    /// Sign in at the provider `issuer` (exactly as its ID tokens name it in `iss`) as the
    /// client `client_id`, with the console reachable at `public_url` (`https://…`, or
    /// `http://` on a loopback address; the redirect URI is `{public_url}/login/oidc/callback`).
    ///
    /// Defaults: a public client (no secret), the scopes `openid profile groups`, the
    /// display name from `name`, else `preferred_username`, else `email` (else the subject),
    /// the groups from `groups`, and the button saying "Sign in with OpenID Connect".
    pub fn new(
        issuer: impl Into<String>,
        client_id: impl Into<String>,
        public_url: impl Into<String>,
    ) -> Self {
        Self {
            issuer: issuer.into().trim_end_matches('/').to_owned(),
            client_id: client_id.into(),
            client_secret: None,
            public_url: public_url.into().trim_end_matches('/').to_owned(),
            scopes: ["openid", "profile", "groups"].map(str::to_owned).to_vec(),
            name_claims: ["name", "preferred_username", "email"]
                .map(str::to_owned)
                .to_vec(),
            groups_claim: "groups".to_owned(),
            provider_name: "OpenID Connect".to_owned(),
        }
    }

    /// The client secret (a confidential client): sent to the token endpoint with HTTP
    /// Basic authentication, and never shown, logged or printed by `Debug`.
    pub fn client_secret(mut self, secret: impl Into<String>) -> Self {
        self.client_secret = Some(Arc::new(Secret::new(secret)));
        self
    }

    /// The scopes asked for (`openid` is added when missing). Providers differ in what
    /// gives the groups: a `groups` scope (Okta, Dex, the default here), a mapper on the
    /// client (Keycloak), or a claim setting (Entra ID); a provider that refuses unknown
    /// scopes needs `["openid", "profile"]` here.
    pub fn scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        let mut scopes: Vec<String> = scopes.into_iter().map(Into::into).collect();
        if !scopes.iter().any(|s| s == "openid") {
            scopes.insert(0, "openid".to_owned());
        }
        self.scopes = scopes;
        self
    }

    /// The ID token claims the display name is read from, first present first (default
    /// `name`, `preferred_username`, `email`); without any, the subject is shown.
    pub fn name_claims<S: Into<String>>(mut self, claims: impl IntoIterator<Item = S>) -> Self {
        self.name_claims = claims.into_iter().map(Into::into).collect();
        self
    }

    /// The ID token claim holding the groups, a list of strings (default `groups`).
    pub fn groups_claim(mut self, claim: impl Into<String>) -> Self {
        self.groups_claim = claim.into();
        self
    }

    /// The provider's name on the login page's button: "Sign in with *name*".
    pub fn provider_name(mut self, name: impl Into<String>) -> Self {
        self.provider_name = name.into();
        self
    }

    /// The redirect URI to register with the provider: `{public_url}/login/oidc/callback`.
    pub fn redirect_uri(&self) -> String {
        format!("{}{CALLBACK_PATH}", self.public_url)
    }

    /// Why this configuration cannot be used, if it cannot.
    pub(crate) fn problem(&self) -> Option<String> {
        if !usable_url(&self.issuer) {
            return Some(
                "the OpenID issuer is neither https:// nor http:// on a loopback address".into(),
            );
        }
        if !usable_url(&self.public_url) {
            return Some(
                "the console's public URL is neither https:// nor http:// on a loopback address"
                    .into(),
            );
        }
        if self.client_id.is_empty() {
            return Some("the OpenID client id is empty".into());
        }
        let token = |s: &String| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c == '!' || ('#'..='[').contains(&c) || (']'..='~').contains(&c))
        };
        if !self.scopes.iter().all(token) {
            return Some("an OpenID scope is not a scope token".into());
        }
        None
    }
}

/// Whether `url` is `https://…`, or `http://` on a loopback address, without user info or
/// a fragment.
fn usable_url(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else {
        return false;
    };
    let scheme_ok = match (url.scheme(), url.host()) {
        ("https", Some(_)) => true,
        ("http", Some(url::Host::Ipv4(ip))) => ip.is_loopback(),
        ("http", Some(url::Host::Ipv6(ip))) => ip.is_loopback(),
        _ => false,
    };
    scheme_ok && url.username().is_empty() && url.password().is_none() && url.fragment().is_none()
}

/// The person an ID token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Person {
    /// The token's `sub`.
    pub(crate) subject: String,
    /// The display name (from the name claims), if any.
    pub(crate) name: Option<String>,
    /// The groups.
    pub(crate) groups: Vec<String>,
}

/// Why a sign-in failed: a sentence for the page and the log. Never holds a code, a token, a
/// verifier or the client secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure(pub(crate) String);

impl Failure {
    pub(crate) fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the provider's discovery document says (the parts the console uses).
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Discovery {
    issuer: String,
    pub(crate) authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
}

/// A started sign-in, kept server-side under its `state`.
pub(crate) struct Pending {
    nonce: String,
    verifier: Secret,
}

/// The OpenID login of a console: its configuration, HTTP client, the sign-ins in flight
/// and the provider's discovery once read.
pub(crate) struct OidcState {
    pub(crate) login: OidcLogin,
    http: reqwest::Client,
    pub(crate) flights: Connects,
    discovery: Mutex<Option<Arc<Discovery>>>,
}

impl OidcState {
    /// The state of `login`, or why it cannot be used.
    pub(crate) fn new(login: OidcLogin) -> Result<Self, String> {
        if let Some(problem) = login.problem() {
            return Err(problem);
        }
        let http = sallyport_http::HttpChannel::builder()
            .build()
            .and_then(|channel| channel.client(CONNECT_TIMEOUT))
            .map_err(|e| format!("the HTTP client for the OpenID provider: {e}"))?;
        Ok(Self {
            login,
            http,
            flights: Connects::new(CONNECT_TTL),
            discovery: Mutex::new(None),
        })
    }

    /// A GET of JSON from the provider.
    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        what: &str,
    ) -> Result<T, Failure> {
        let response = self
            .http
            .get(url)
            .header("accept", "application/json")
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|_| Failure::new(format!("The provider's {what} could not be reached.")))?;
        if !response.status().is_success() {
            return Err(Failure::new(format!(
                "The provider's {what} answered HTTP {}.",
                response.status().as_u16()
            )));
        }
        let body = read_bounded(response)
            .await
            .ok_or_else(|| Failure::new(format!("The provider's {what} could not be read.")))?;
        serde_json::from_slice(&body).map_err(|_| {
            Failure::new(format!(
                "The provider's {what} is not what OpenID Connect describes."
            ))
        })
    }

    /// The provider's discovery document, read once (a failed read is tried again next
    /// time).
    pub(crate) async fn discovery(&self) -> Result<Arc<Discovery>, Failure> {
        if let Some(found) = self
            .discovery
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            return Ok(Arc::clone(found));
        }
        let url = format!("{}/.well-known/openid-configuration", self.login.issuer);
        let found: Discovery = self.get_json(&url, "discovery document").await?;
        if found.issuer.trim_end_matches('/') != self.login.issuer {
            return Err(Failure::new(
                "The provider's discovery document names another issuer than the one configured.",
            ));
        }
        for endpoint in [
            &found.authorization_endpoint,
            &found.token_endpoint,
            &found.jwks_uri,
        ] {
            if !usable_url(endpoint) {
                return Err(Failure::new(
                    "The provider's discovery document names an endpoint that is neither https:// nor on a loopback address.",
                ));
            }
        }
        let found = Arc::new(found);
        *self
            .discovery
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&found));
        Ok(found)
    }

    /// Starts a sign-in: the authorization URL, its `state`, and what to keep.
    pub(crate) async fn start(&self) -> Result<(String, String, Pending), Failure> {
        let discovery = self.discovery().await?;
        let random = || {
            sallyport_http::oauth::random_token()
                .map_err(|_| Failure::new("The random source failed."))
        };
        let (state, nonce, verifier) = (random()?, random()?, Secret::new(random()?));
        let mut url = reqwest::Url::parse(&discovery.authorization_endpoint)
            .map_err(|_| Failure::new("The provider's authorization endpoint is not a URL."))?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.login.client_id)
            .append_pair("redirect_uri", &self.login.redirect_uri())
            .append_pair("scope", &self.login.scopes.join(" "))
            .append_pair("state", &state)
            .append_pair("nonce", &nonce)
            .append_pair(
                "code_challenge",
                &sallyport_http::oauth::code_challenge(verifier.expose()),
            )
            .append_pair("code_challenge_method", "S256");
        Ok((url.into(), state, Pending { nonce, verifier }))
    }

    /// Whether the `iss` of the provider's redirect (RFC 9207), when it carries one, names
    /// the configured issuer: a redirect from another provider (a mix-up) is refused before
    /// its code goes anywhere.
    pub(crate) fn is_own_issuer(&self, iss: Option<&str>) -> bool {
        iss.is_none_or(|iss| iss.trim_end_matches('/') == self.login.issuer)
    }

    /// Finishes a sign-in with the provider's code: exchanges it (with the PKCE verifier),
    /// validates the ID token, and says whom it names.
    pub(crate) async fn finish(&self, pending: Pending, code: &str) -> Result<Person, Failure> {
        let discovery = self.discovery().await?;
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", ""),
            ("code_verifier", pending.verifier.expose()),
        ];
        let redirect_uri = self.login.redirect_uri();
        form[2].1 = &redirect_uri;
        let mut request = self
            .http
            .post(&discovery.token_endpoint)
            .header("accept", "application/json")
            .timeout(REQUEST_TIMEOUT);
        match &self.login.client_secret {
            // RFC 6749 §2.3.1: both form-encoded, then Basic.
            Some(secret) => {
                request = request.basic_auth(
                    form_encode(&self.login.client_id),
                    Some(form_encode(secret.expose())),
                );
            }
            None => form.push(("client_id", &self.login.client_id)),
        }
        let response = request
            .form(&form)
            .send()
            .await
            .map_err(|_| Failure::new("The provider's token endpoint could not be reached."))?;
        let status = response.status();
        let body = read_bounded(response)
            .await
            .ok_or_else(|| Failure::new("The provider's token answer could not be read."))?;
        let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if !status.is_success() {
            let error = answer["error"]
                .as_str()
                .filter(|e| {
                    e.len() <= 64
                        && e.chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                })
                .unwrap_or("no error code");
            return Err(Failure::new(format!(
                "The provider refused the code (HTTP {}, {error}).",
                status.as_u16()
            )));
        }
        let Some(id_token) = answer["id_token"].as_str() else {
            return Err(Failure::new(
                "The provider's token answer carries no ID token (is `openid` among the scopes?).",
            ));
        };
        let keys: Jwks = self.get_json(&discovery.jwks_uri, "key set").await?;
        let claims = validate(
            id_token,
            &keys,
            &Expected {
                issuer: &self.login.issuer,
                client_id: &self.login.client_id,
                nonce: &pending.nonce,
                now_s: now_s(),
            },
        )?;
        Ok(self.person(&claims))
    }

    /// The person the validated claims name.
    fn person(&self, claims: &Map<String, Value>) -> Person {
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let name = self
            .login
            .name_claims
            .iter()
            .filter_map(|c| claims.get(c).and_then(Value::as_str))
            .map(str::trim)
            .find(|n| !n.is_empty())
            .map(str::to_owned);
        let groups = match claims.get(&self.login.groups_claim) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            Some(Value::String(one)) => vec![one.clone()],
            _ => Vec::new(),
        };
        Person {
            subject,
            name,
            groups,
        }
    }
}

/// `text` form-urlencoded (for HTTP Basic client authentication).
fn form_encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// The body of `response`, if it is at most [`MAX_ANSWER`] bytes.
async fn read_bounded(response: reqwest::Response) -> Option<Vec<u8>> {
    if response
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER as u64)
    {
        return None;
    }
    let body = response.bytes().await.ok()?;
    (body.len() <= MAX_ANSWER).then(|| body.to_vec())
}

fn now_s() -> u64 {
    sallyport_core::clock::now_ms() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn configuration_is_checked_and_the_secret_never_prints() {
        let login = OidcLogin::new(
            "https://id.example.com/",
            "console",
            "http://127.0.0.1:8640/",
        )
        .client_secret("s3cret-canary");
        assert_eq!(login.problem(), None);
        assert_eq!(login.issuer, "https://id.example.com");
        assert_eq!(
            login.redirect_uri(),
            "http://127.0.0.1:8640/login/oidc/callback"
        );
        assert!(!format!("{login:?}").contains("s3cret-canary"));
        assert!(
            OidcLogin::new("http://id.example.com", "c", "https://c.example.com")
                .problem()
                .is_some()
        );
        assert!(
            OidcLogin::new("https://id.example.com", "c", "http://console.example.com")
                .problem()
                .is_some()
        );
        assert!(
            OidcLogin::new("https://id.example.com", "", "https://c.example.com")
                .problem()
                .is_some()
        );
        let scoped = OidcLogin::new("https://id.example.com", "c", "https://c.example.com")
            .scopes(["profile"]);
        assert_eq!(scoped.scopes, ["openid", "profile"]);
        assert!(scoped.scopes(["bad scope"]).problem().is_some());
    }

    #[test]
    fn names_and_groups_come_from_the_configured_claims() {
        let state = OidcState::new(
            OidcLogin::new("https://id.example.com", "c", "https://c.example.com")
                .groups_claim("roles"),
        )
        .expect("state");
        let claims = |v: Value| v.as_object().cloned().expect("object");
        let person = state.person(&claims(json!({
            "sub": "u-1", "name": " ", "preferred_username": "alice", "roles": ["a", "b"],
        })));
        assert_eq!(person.name.as_deref(), Some("alice"));
        assert_eq!(person.groups, ["a", "b"]);
        let person = state.person(&claims(json!({"sub": "u-2", "roles": "one"})));
        assert_eq!((person.name, person.groups), (None, vec!["one".to_owned()]));
    }
}
