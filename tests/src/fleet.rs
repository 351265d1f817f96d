//! The rig of the OAuth fleet tests (`tests/integration/oauth_fleet_pg.rs`, run by the
//! `fleet-caller` processes): an API on 127.0.0.1:0 whose paths name the subject a call is
//! made for, and which checks every bearer token with the real provider's introspection
//! endpoint ([`crate::oidc::OidcProvider`]), as a resource server does.
//!
//! - `GET /v1/{subject}/items/{id}` (an observe action) and `POST /v1/{subject}/sends/{id}`
//!   (a commitment that is never resent) answer `200 {"id": <the token's subject>, "state":
//!   "ok"}` for an active token, `401` otherwise.
//! - Like a resource server that caches introspection (RFC 7662 §4), it asks the provider
//!   about a token the first time it sees it, and keeps an active token's subject and `exp`:
//!   a later request with it is valid while that second has not come when the request
//!   arrives (the provider's own rule, `exp <= now` in whole seconds, is expired). So it
//!   judges each token as of the moment the request arrived, and the provider (one node
//!   process) is not asked once per call: with 64 calls in flight its queue grew past a
//!   second, longer than a 2 s token is used, and the refreshes waited in it. A token
//!   revoked at the provider is therefore accepted here until its `exp`, at most one token
//!   lifetime.
//! - It counts, per subject, the requests and the `401`s, the requests whose token belonged
//!   to another subject than the path's, and the requests per send id (a commitment sent
//!   twice shows as a count of 2); and it keeps every bearer token it received, so a test can
//!   look for them where no token may appear.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::oidc::{API_CLIENT, OidcProvider, form};

/// What the API saw for one subject.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubjectCounts {
    /// Requests received.
    pub requests: u64,
    /// Requests answered 401: no token, one the provider did not call active, or one whose
    /// `exp` had come when the request arrived.
    pub unauthorized: u64,
    /// Requests whose token belonged to another subject.
    pub mismatched: u64,
}

#[derive(Debug, Default)]
struct Seen {
    subjects: BTreeMap<String, SubjectCounts>,
    sends: BTreeMap<String, u64>,
    tokens: BTreeSet<String>,
    /// token → its subject and `exp` (Unix seconds), from the provider's answers.
    active: std::collections::HashMap<String, (String, u64)>,
    /// The longest the provider took to answer an introspection, in ms.
    slowest_check_ms: u64,
}

#[derive(Clone)]
struct ApiState {
    http: reqwest::Client,
    issuer: String,
    seen: Arc<Mutex<Seen>>,
}

impl ApiState {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

async fn introspect(state: &ApiState, token: &str) -> Option<Value> {
    let answer = state
        .http
        .post(format!("{}/token/introspection", state.issuer))
        .basic_auth(API_CLIENT.0, Some(API_CLIENT.1))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("token", token)]))
        .send()
        .await
        .ok()?;
    serde_json::from_slice(&answer.bytes().await.ok()?).ok()
}

/// Answers `401` and counts it for `subject`.
fn refuse(state: &ApiState, subject: &str) -> Response {
    state
        .seen()
        .subjects
        .entry(subject.to_owned())
        .or_default()
        .unauthorized += 1;
    (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({"error": "invalid_token"})),
    )
        .into_response()
}

async fn check(state: &ApiState, subject: &str, headers: &HeaderMap) -> Response {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    {
        let mut seen = state.seen();
        seen.subjects
            .entry(subject.to_owned())
            .or_default()
            .requests += 1;
        if let Some(token) = &token {
            seen.tokens.insert(token.clone());
        }
    }
    let arrived = now_ms();
    let Some(token) = token else {
        return refuse(state, subject);
    };
    // A token the provider called active is known until its `exp`: valid while that second
    // has not come when the request arrives (the provider's own rule), refused after.
    let known = state.seen().active.get(&token).cloned();
    let who = match known {
        Some((who, exp)) if exp > arrived / 1000 => who,
        Some(_) => return refuse(state, subject),
        None => {
            let answer = introspect(state, &token).await;
            let answered = now_ms();
            let mut seen = state.seen();
            seen.slowest_check_ms = seen.slowest_check_ms.max(answered.saturating_sub(arrived));
            let active = answer.as_ref().filter(|a| a["active"] == true);
            let Some(answer) = active else {
                drop(seen);
                return refuse(state, subject);
            };
            let who = answer["sub"].as_str().unwrap_or_default().to_owned();
            let exp = answer["exp"].as_u64().unwrap_or(0);
            seen.active.insert(token, (who.clone(), exp));
            who
        }
    };
    if who != subject {
        state
            .seen()
            .subjects
            .entry(subject.to_owned())
            .or_default()
            .mismatched += 1;
    }
    axum::Json(json!({"id": who, "state": "ok"})).into_response()
}

async fn item(
    State(state): State<ApiState>,
    Path((subject, _id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    check(&state, &subject, &headers).await
}

async fn send(
    State(state): State<ApiState>,
    Path((subject, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    *state.seen().sends.entry(id).or_default() += 1;
    check(&state, &subject, &headers).await
}

/// The fleet's API, checking tokens with the provider. Stops when dropped.
#[derive(Debug)]
pub struct FleetApi {
    url: String,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl FleetApi {
    /// Starts the API on 127.0.0.1:0, checking tokens with `provider`.
    pub async fn start(provider: &OidcProvider) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let http = sallyport_http::HttpChannel::builder()
            .build()
            .expect("channel")
            .client(Duration::from_secs(10))
            .expect("client");
        let state = ApiState {
            http,
            issuer: provider.issuer().to_owned(),
            seen: Arc::clone(&seen),
        };
        let app = Router::new()
            .route("/v1/{subject}/items/{id}", get(item))
            .route("/v1/{subject}/sends/{id}", post(send))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, seen, task }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What it saw, per subject.
    pub fn subjects(&self) -> BTreeMap<String, SubjectCounts> {
        self.seen().subjects.clone()
    }

    /// Requests received, all subjects together.
    pub fn requests(&self) -> u64 {
        self.seen().subjects.values().map(|c| c.requests).sum()
    }

    /// Requests answered 401, all subjects together.
    pub fn unauthorized(&self) -> u64 {
        self.seen().subjects.values().map(|c| c.unauthorized).sum()
    }

    /// The longest the provider took to answer one of its introspections, in ms.
    pub fn slowest_check_ms(&self) -> u64 {
        self.seen().slowest_check_ms
    }

    /// Requests per send id (the commitment's path).
    pub fn sends(&self) -> BTreeMap<String, u64> {
        self.seen().sends.clone()
    }

    /// Every bearer token it received.
    pub fn tokens(&self) -> BTreeSet<String> {
        self.seen().tokens.clone()
    }
}

impl Drop for FleetApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One call a `fleet-caller` made, as it printed it:
/// `START_MS END_MS PROCESS SUBJECT ACTION STATUS [CODE]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallLine {
    /// When the call started, ms since the Unix epoch.
    pub start_ms: u64,
    /// When it returned.
    pub end_ms: u64,
    /// The process's index.
    pub process: usize,
    /// The subject it was made for.
    pub subject: String,
    /// `get_item` or `send_item`.
    pub action: String,
    /// The result's status.
    pub status: String,
    /// The result's code, if any.
    pub code: Option<String>,
}

impl CallLine {
    /// Parses one line; `None` for anything else.
    pub fn parse(line: &str) -> Option<Self> {
        let mut parts = line.split_whitespace();
        let start_ms = parts.next()?.parse().ok()?;
        let end_ms = parts.next()?.parse().ok()?;
        let process = parts.next()?.parse().ok()?;
        let subject = parts.next()?.to_owned();
        let action = parts.next()?.to_owned();
        let status = parts.next()?.to_owned();
        let code = parts.next().map(str::to_owned);
        Some(Self {
            start_ms,
            end_ms,
            process,
            subject,
            action,
            status,
            code,
        })
    }

    /// `status` or `status/code`.
    pub fn outcome(&self) -> String {
        match &self.code {
            Some(code) => format!("{}/{code}", self.status),
            None => self.status.clone(),
        }
    }
}
