//! A real OAuth 2.0 / OpenID provider for the OAuth tests: `oidc-provider` from npm, run by
//! node from `tests/oidc/provider.mjs` (see that file for its configuration: PKCE required,
//! refresh tokens rotated with reuse detection, client credentials, revocation,
//! introspection, access tokens of a few seconds).
//!
//! [`OidcProvider::start`] starts it on a free loopback port, waits for its discovery
//! document and kills it on drop. It counts the provider's own events (tokens issued,
//! refresh-token reuse detected, revocations) from the JSON lines it prints.
//! [`OidcProvider::authorize`] obtains an authorization-code grant without a browser: the
//! provider's interaction route approves at once, so the rig follows the redirects of
//! `GET /auth?…&code_challenge=…` over HTTP, carrying the cookies, up to the redirect URI,
//! and exchanges the code with the PKCE verifier. [`OidcProvider::browse`] plays the browser
//! for an authorization URL someone else made (a connect): it follows the same redirects and
//! returns the redirect to the loopback URI, which [`OidcProvider::browse_and_deliver`] also
//! delivers to its listener.
//!
//! The accounts `alice` ("Alice Approver", groups `approvers`) and `bob` ("Bob Builder",
//! groups `approvers` and `builders`) have a name and groups in their ID tokens (scopes
//! `profile` and `groups`); the console's login signs in with [`CONSOLE_LOGIN_CLIENT`].
//!
//! [`IntrospectingApi`] is a protected API on 127.0.0.1:0 that checks every bearer token
//! with the provider's introspection endpoint: `200 {"id": <subject or client>, "state":
//! "ok"}` for an active token, `401` otherwise.
//!
//! `tests/run.sh` runs `npm ci` in `tests/oidc` when `node_modules` is missing.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The client-credentials client.
pub const MACHINE_CLIENT: (&str, &str) = ("machine", "machine-secret-canary-7f3a");
/// The authorization-code client (with refresh tokens).
pub const WEBAPP_CLIENT: (&str, &str) = ("webapp", "webapp-secret-canary-91c2");
/// The console's OpenID Connect login client (scopes `openid profile groups`; a native
/// client, so its loopback redirect URI `http://127.0.0.1:PORT/login/oidc/callback` matches
/// on any port).
pub const CONSOLE_LOGIN_CLIENT: (&str, &str) = ("console-login", "console-secret-canary-3b8e");
/// The resource server's client, for introspection.
pub const API_CLIENT: (&str, &str) = ("api", "api-secret-canary-55d0");
/// The webapp client's registered redirect URI. The client is a native one (RFC 8252), so
/// the provider takes its loopback redirect URIs with any port: `http://127.0.0.1:PORT/callback`
/// (the CLI's connect) and `http://127.0.0.1:PORT/connect/callback` (the console's).
pub const REDIRECT_URI: &str = "http://127.0.0.1/callback";

/// A running `oidc-provider`.
pub struct OidcProvider {
    child: Child,
    issuer: String,
    events: Arc<Mutex<Vec<Value>>>,
    http: reqwest::Client,
}

impl std::fmt::Debug for OidcProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcProvider")
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

/// The tokens of an authorization-code grant.
#[derive(Debug)]
pub struct CodeGrant {
    /// The refresh token.
    pub refresh_token: String,
    /// The first access token.
    pub access_token: String,
}

fn http_client() -> reqwest::Client {
    sallyport_http::HttpChannel::builder()
        .build()
        .expect("channel")
        .client(Duration::from_secs(5))
        .expect("client")
}

impl OidcProvider {
    /// The directory of `provider.mjs`.
    pub fn dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("oidc")
    }

    /// Starts the provider with access tokens of `token_ttl` seconds, and waits (up to 30 s)
    /// until it serves its discovery document.
    ///
    /// # Panics
    ///
    /// When node or `tests/oidc/node_modules` is missing (run `npm ci` there, or
    /// `tests/run.sh`), or the provider does not come up.
    pub async fn start(token_ttl: u64) -> Self {
        let dir = Self::dir();
        assert!(
            dir.join("node_modules/oidc-provider").is_dir(),
            "tests/oidc/node_modules is missing: run `npm ci` in {} (tests/run.sh does)",
            dir.display()
        );
        let mut child = Command::new("node")
            .arg("provider.mjs")
            .current_dir(&dir)
            .env("OIDC_TOKEN_TTL", token_ttl.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node (install nodejs, or run tests/run.sh)");
        let stdout = child.stdout.take().expect("stdout");
        let events = Arc::new(Mutex::new(Vec::new()));
        let (issuer_tx, issuer_rx) = std::sync::mpsc::channel();
        let sink = Arc::clone(&events);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(event) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if event["event"] == "listening" {
                    let _ = issuer_tx.send(event["issuer"].as_str().unwrap_or_default().to_owned());
                }
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(event);
            }
        });
        let issuer =
            tokio::task::spawn_blocking(move || issuer_rx.recv_timeout(Duration::from_secs(30)))
                .await
                .expect("join")
                .expect("the provider did not start listening within 30 s");
        let provider = Self {
            child,
            issuer,
            events,
            http: http_client(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let discovery = provider
                .http
                .get(format!(
                    "{}/.well-known/openid-configuration",
                    provider.issuer
                ))
                .send()
                .await;
            if let Ok(r) = discovery
                && r.status().is_success()
            {
                let doc = json_of(r).await;
                assert_eq!(doc["token_endpoint"], provider.token_endpoint().as_str());
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no discovery document within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        provider
    }

    /// `http://127.0.0.1:PORT`.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The token endpoint.
    pub fn token_endpoint(&self) -> String {
        format!("{}/token", self.issuer)
    }

    /// Every event the provider printed so far.
    pub fn events(&self) -> Vec<Value> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many events named `name` it printed.
    pub fn count(&self, name: &str) -> usize {
        self.events().iter().filter(|e| e["event"] == name).count()
    }

    /// How many tokens it issued for `grant_type`.
    pub fn tokens_issued(&self, grant_type: &str) -> usize {
        self.events()
            .iter()
            .filter(|e| e["event"] == "token" && e["grant_type"] == grant_type)
            .count()
    }

    /// Times a rotated refresh token was presented again (the provider then revoked the
    /// grant).
    pub fn reuse_detections(&self) -> usize {
        self.count("reuse_detected")
    }

    /// An authorization-code grant for `login` with `scope`, PKCE S256, without a browser.
    ///
    /// # Panics
    ///
    /// When the provider does not redirect to the redirect URI with the same `state` and a
    /// code, or does not exchange it.
    pub async fn authorize(&self, login: &str, scope: &str) -> CodeGrant {
        let verifier: String = (0..64)
            .map(|_| {
                let alphabet =
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~";
                alphabet[fastrand::usize(..alphabet.len())] as char
            })
            .collect();
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(Sha256::digest(verifier.as_bytes()));
        let state = format!("st{}", fastrand::u64(..));
        let mut url = reqwest::Url::parse(&format!("{}/auth", self.issuer)).expect("url");
        url.query_pairs_mut()
            .append_pair("client_id", WEBAPP_CLIENT.0)
            .append_pair("response_type", "code")
            .append_pair("redirect_uri", REDIRECT_URI)
            .append_pair("scope", scope)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", &state)
            .append_pair("prompt", "consent")
            .append_pair("login_hint", login);
        let location = self.browse(url.as_str(), None).await;
        assert!(
            location.starts_with(REDIRECT_URI),
            "the authorization redirects ended at {location}, not the redirect URI"
        );
        let back = reqwest::Url::parse(&location).expect("redirect URL");
        let pairs: Vec<(String, String)> = back.query_pairs().into_owned().collect();
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(
            get("state").as_deref(),
            Some(state.as_str()),
            "state echoed"
        );
        let code = get("code").unwrap_or_else(|| panic!("no code in {location}"));
        let answer = self
            .http
            .post(self.token_endpoint())
            .basic_auth(WEBAPP_CLIENT.0, Some(WEBAPP_CLIENT.1))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[
                ("grant_type", "authorization_code"),
                ("code", &code),
                ("redirect_uri", REDIRECT_URI),
                ("code_verifier", &verifier),
            ]))
            .send()
            .await
            .expect("code exchange");
        let answer = json_of(answer).await;
        CodeGrant {
            refresh_token: answer["refresh_token"]
                .as_str()
                .unwrap_or_else(|| panic!("no refresh token: {answer}"))
                .to_owned(),
            access_token: answer["access_token"]
                .as_str()
                .expect("access token")
                .to_owned(),
        }
    }

    /// Plays the browser of a human who opens `authorization_url` at this provider and logs
    /// in as `login` (sent as `login_hint` when given and the URL has none; the provider
    /// approves at once, and refuses for the account `refuse`): follows the provider's
    /// redirects, carrying its cookies, and returns the first redirect that leaves the
    /// provider (the redirect URI with `code` and `state`, or `error`), without following it.
    ///
    /// # Panics
    ///
    /// When the provider answers without a redirect, or redirects more than 10 times.
    pub async fn browse(&self, authorization_url: &str, login: Option<&str>) -> String {
        let mut url = reqwest::Url::parse(authorization_url).expect("authorization URL");
        if let Some(login) = login
            && !url.query_pairs().any(|(k, _)| k == "login_hint")
        {
            url.query_pairs_mut().append_pair("login_hint", login);
        }
        let mut next = url.to_string();
        let mut cookies: Vec<(String, String)> = Vec::new();
        for _ in 0..10 {
            let cookie = cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; ");
            let mut request = self.http.get(&next);
            if !cookie.is_empty() {
                request = request.header("cookie", cookie);
            }
            let response = request.send().await.expect("authorization request");
            for set in response.headers().get_all("set-cookie") {
                let pair = set
                    .to_str()
                    .unwrap_or_default()
                    .split(';')
                    .next()
                    .unwrap_or_default();
                if let Some((k, v)) = pair.split_once('=') {
                    cookies.retain(|(name, _)| name != k);
                    cookies.push((k.to_owned(), v.to_owned()));
                }
            }
            let location = response
                .headers()
                .get("location")
                .and_then(|l| l.to_str().ok())
                .map(str::to_owned)
                .unwrap_or_else(|| panic!("no redirect from {next}: HTTP {}", response.status()));
            let location = if location.starts_with('/') {
                format!("{}{location}", self.issuer)
            } else {
                location
            };
            if !location.starts_with(&format!("{}/", self.issuer)) {
                return location;
            }
            next = location;
        }
        panic!("the authorization redirects did not leave the provider within 10 redirects")
    }

    /// Plays the browser to the end: [`browse`](Self::browse), then delivers the redirect
    /// to its loopback listener (`GET` the redirect URI, as the browser would) and returns
    /// that listener's status and page.
    ///
    /// # Panics
    ///
    /// As [`browse`](Self::browse), or when the listener does not answer.
    pub async fn browse_and_deliver(
        &self,
        authorization_url: &str,
        login: Option<&str>,
    ) -> (u16, String) {
        let redirect = self.browse(authorization_url, login).await;
        let response = self
            .http
            .get(&redirect)
            .send()
            .await
            .expect("the redirect's listener answers");
        let status = response.status().as_u16();
        (status, response.text().await.expect("page"))
    }

    /// Revokes `token` of `client` (RFC 7009); a refresh token's whole grant goes with it.
    pub async fn revoke(&self, token: &str, client: (&str, &str)) {
        let status = self
            .http
            .post(format!("{}/token/revocation", self.issuer))
            .basic_auth(client.0, Some(client.1))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("token", token)]))
            .send()
            .await
            .expect("revocation")
            .status();
        assert!(status.is_success(), "revocation answered {status}");
    }

    /// The provider's introspection of `token` (as the resource server).
    pub async fn introspect(&self, token: &str) -> Value {
        introspect(&self.http, &self.issuer, token).await
    }
}

async fn introspect(http: &reqwest::Client, issuer: &str, token: &str) -> Value {
    let answer = http
        .post(format!("{issuer}/token/introspection"))
        .basic_auth(API_CLIENT.0, Some(API_CLIENT.1))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("token", token)]))
        .send()
        .await
        .expect("introspection");
    json_of(answer).await
}

/// An `application/x-www-form-urlencoded` body.
pub fn form(pairs: &[(&str, &str)]) -> String {
    let mut serializer = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        serializer.append_pair(k, v);
    }
    serializer.finish()
}

async fn json_of(response: reqwest::Response) -> Value {
    let bytes = response.bytes().await.expect("body");
    serde_json::from_slice(&bytes).expect("a JSON body")
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A protected API that checks every bearer token with the provider.
#[derive(Debug)]
pub struct IntrospectingApi {
    url: String,
    counts: Arc<ApiCounts>,
    task: tokio::task::JoinHandle<()>,
}

/// What the API saw.
#[derive(Debug, Default)]
struct ApiCounts {
    requests: AtomicU64,
    accepted: AtomicU64,
    unauthorized: AtomicU64,
    without_token: AtomicU64,
}

#[derive(Clone)]
struct ApiState {
    http: reqwest::Client,
    issuer: String,
    counts: Arc<ApiCounts>,
}

async fn check(State(state): State<ApiState>, headers: HeaderMap) -> Response {
    state.counts.requests.fetch_add(1, Ordering::SeqCst);
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let Some(token) = token else {
        state.counts.without_token.fetch_add(1, Ordering::SeqCst);
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "no token"})),
        )
            .into_response();
    };
    let answer = introspect(&state.http, &state.issuer, token).await;
    if answer["active"] == true {
        state.counts.accepted.fetch_add(1, Ordering::SeqCst);
        let who = answer["sub"]
            .as_str()
            .or_else(|| answer["client_id"].as_str())
            .unwrap_or_default();
        axum::Json(json!({"id": who, "state": "ok"})).into_response()
    } else {
        state.counts.unauthorized.fetch_add(1, Ordering::SeqCst);
        (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "invalid_token"})),
        )
            .into_response()
    }
}

impl IntrospectingApi {
    /// Starts the API on 127.0.0.1:0, checking tokens with `provider`.
    pub async fn start(provider: &OidcProvider) -> Self {
        let counts = Arc::new(ApiCounts::default());
        let state = ApiState {
            http: http_client(),
            issuer: provider.issuer.clone(),
            counts: Arc::clone(&counts),
        };
        let app = Router::new().fallback(check).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, counts, task }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Requests received.
    pub fn requests(&self) -> u64 {
        self.counts.requests.load(Ordering::SeqCst)
    }

    /// Requests whose token the provider said was active.
    pub fn accepted(&self) -> u64 {
        self.counts.accepted.load(Ordering::SeqCst)
    }

    /// Requests answered 401 for an inactive token.
    pub fn unauthorized(&self) -> u64 {
        self.counts.unauthorized.load(Ordering::SeqCst)
    }

    /// Requests that carried no bearer token.
    pub fn without_token(&self) -> u64 {
        self.counts.without_token.load(Ordering::SeqCst)
    }
}

impl Drop for IntrospectingApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}
