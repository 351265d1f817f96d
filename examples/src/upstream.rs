//! The embedded demo upstream: a small deployments-and-invoices API on `127.0.0.1:0`, in the
//! same process, that counts every request it receives.
//!
//! - `GET  /v1/projects/{project_id}/builds` — the project's builds.
//! - `GET  /v1/projects/{project_id}/builds/latest` — the newest of them.
//! - `POST /v1/projects/{project_id}/deployments` — queue a preview deployment: `202` with a
//!   deployment id; `409` when a preview of that build already exists.
//! - `GET  /v1/projects/{project_id}/deployments/{deployment_id}` — `queued`, then `ready`
//!   from the second look on.
//! - `POST /v1/invoices` — create an invoice, honouring `Idempotency-Key` (a replay returns
//!   the first answer; the same key with another payload is `422`). An invoice whose
//!   reference starts with `drop-` is committed and then the connection is closed without a
//!   response byte, every time: the demo's lost response. One whose reference starts with
//!   `slow-` is committed and never answered: the demo's timeout.
//! - `GET  /v1/invoices?customer_id=…&reference=…` — the invoices with that reference.
//!
//! Every route requires `Authorization: Bearer <token>` with the token the server was
//! started with.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// The bearer token the demo programs give the demo upstream (a demo value, not a secret).
pub const DEMO_TOKEN: &str = "demo-token-7f3c9a1e";

/// A running demo upstream. Dropping it stops the server.
#[derive(Debug)]
pub struct DemoUpstream {
    addr: SocketAddr,
    state: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DemoUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Debug, Default)]
struct Shared {
    token: String,
    requests: AtomicU64,
    data: Mutex<Data>,
}

#[derive(Debug, Default)]
struct Data {
    /// (project, build) -> deployment id.
    previews: HashMap<(String, String), String>,
    /// deployment id -> times looked at.
    looks: HashMap<String, u32>,
    /// Invoices in creation order: (invoice id, customer, reference, amount).
    invoices: Vec<(String, String, String, u64)>,
    /// Idempotency key -> (payload, response).
    keys: HashMap<String, (Value, Value)>,
}

/// Kills the connection a request arrived on.
#[derive(Clone, Debug)]
struct Kill(Arc<Notify>);

impl DemoUpstream {
    /// Starts the server on a free loopback port, accepting `token`.
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound.
    pub async fn start(token: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Shared {
            token: token.to_owned(),
            ..Shared::default()
        });
        let router = Router::new()
            .route("/v1/projects/{project_id}/builds", get(list_builds))
            .route("/v1/projects/{project_id}/builds/latest", get(latest_build))
            .route(
                "/v1/projects/{project_id}/deployments",
                post(create_deployment),
            )
            .route(
                "/v1/projects/{project_id}/deployments/{deployment_id}",
                get(get_deployment),
            )
            .route("/v1/invoices", post(create_invoice).get(find_invoices))
            .with_state(Arc::clone(&state));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let kill = Arc::new(Notify::new());
                let service = TowerToHyperService::new(
                    router.clone().layer(Extension(Kill(Arc::clone(&kill)))),
                );
                tokio::spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service);
                    // A killed connection is dropped here: the socket closes with no
                    // response byte written.
                    tokio::select! {
                        _ = conn => {}
                        () = kill.notified() => {}
                    }
                });
            }
        });
        Ok(Self { addr, state, task })
    }

    /// The base URL (`http://127.0.0.1:PORT`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The metadata of a bearer credential named `name` for this server: its binding is the
    /// server's base URL, so the credential's token is sent here and nowhere else.
    #[must_use]
    pub fn credential(&self, name: &str) -> CredentialMeta {
        CredentialMeta::new(name, CredentialKind::Bearer, Binding::url(self.base_url()))
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Invoices with `reference` that exist.
    pub fn invoices_with_reference(&self, reference: &str) -> usize {
        let data = self
            .state
            .data
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        data.invoices.iter().filter(|i| i.2 == reference).count()
    }
}

#[allow(
    clippy::result_large_err,
    reason = "the error is the response handed straight back to axum"
)]
fn authorized(state: &Shared, headers: &HeaderMap) -> Result<(), Response> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    let expected = format!("Bearer {}", state.token);
    match headers.get("authorization").and_then(|v| v.to_str().ok()) {
        Some(v) if v == expected => Ok(()),
        _ => Err((
            StatusCode::UNAUTHORIZED,
            Json(json!({"message": "missing or wrong bearer token"})),
        )
            .into_response()),
    }
}

async fn list_builds(
    State(state): State<Arc<Shared>>,
    Path(project_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authorized(&state, &headers) {
        return r;
    }
    Json(json!({
        "project_id": project_id,
        "builds": builds(),
        "internal_trace": INTERNAL_TRACE,
    }))
    .into_response()
}

async fn latest_build(
    State(state): State<Arc<Shared>>,
    Path(project_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authorized(&state, &headers) {
        return r;
    }
    let [.., mut latest] = builds();
    latest["project_id"] = json!(project_id);
    latest["internal_trace"] = json!(INTERNAL_TRACE);
    Json(latest).into_response()
}

/// A field no declared result names: an action's result must never carry it to the agent.
const INTERNAL_TRACE: &str = "db=10.0.3.7:5432 shard=7";

/// Every project's builds, oldest first.
fn builds() -> [Value; 2] {
    [
        json!({"build_id": "build_101", "tests": "passed", "commit": "4f2a9c1"}),
        json!({"build_id": "build_102", "tests": "failed", "commit": "9b7e003"}),
    ]
}

#[derive(Deserialize)]
struct DeploymentBody {
    build_id: String,
}

async fn create_deployment(
    State(state): State<Arc<Shared>>,
    Path(project_id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<DeploymentBody>,
) -> Response {
    if let Err(r) = authorized(&state, &headers) {
        return r;
    }
    let mut data = state.data.lock().unwrap_or_else(PoisonError::into_inner);
    let key = (project_id, body.build_id);
    if let Some(id) = data.previews.get(&key) {
        let id = id.clone();
        return (
            StatusCode::CONFLICT,
            Json(json!({"message": "a preview of this build already exists", "deployment_id": id, "operation_status": "exists"})),
        )
            .into_response();
    }
    let id = format!("dep_{}", 2388 + data.previews.len());
    data.previews.insert(key, id.clone());
    (
        StatusCode::ACCEPTED,
        Json(json!({"deployment_id": id, "operation_status": "queued"})),
    )
        .into_response()
}

async fn get_deployment(
    State(state): State<Arc<Shared>>,
    Path((_project_id, deployment_id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authorized(&state, &headers) {
        return r;
    }
    let mut data = state.data.lock().unwrap_or_else(PoisonError::into_inner);
    if !data.previews.values().any(|d| *d == deployment_id) {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"message": "no such deployment"})),
        )
            .into_response();
    }
    let looks = data.looks.entry(deployment_id.clone()).or_insert(0);
    *looks += 1;
    let status = if *looks > 1 { "ready" } else { "queued" };
    Json(json!({
        "deployment_id": deployment_id,
        "operation_status": status,
        "url": if status == "ready" { json!(format!("https://{deployment_id}.preview.example")) } else { Value::Null },
    }))
    .into_response()
}

#[derive(Deserialize)]
struct InvoiceBody {
    customer_id: String,
    amount_cents: u64,
    reference: String,
}

async fn create_invoice(
    State(state): State<Arc<Shared>>,
    Extension(kill): Extension<Kill>,
    headers: HeaderMap,
    Json(raw): Json<Value>,
) -> Response {
    if let Err(r) = authorized(&state, &headers) {
        return r;
    }
    let Ok(body) = serde_json::from_value::<InvoiceBody>(raw.clone()) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"message": "bad invoice"})),
        )
            .into_response();
    };
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"message": "Idempotency-Key header is required"})),
        )
            .into_response();
    };
    let response = {
        let mut data = state.data.lock().unwrap_or_else(PoisonError::into_inner);
        match data.keys.get(&key) {
            Some((payload, _)) if *payload != raw => {
                return (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Json(json!({"message": "idempotency key reused with another payload"})),
                )
                    .into_response();
            }
            Some((_, response)) => response.clone(),
            None => {
                let id = format!("inv_{}", 5001 + data.invoices.len());
                data.invoices.push((
                    id.clone(),
                    body.customer_id.clone(),
                    body.reference.clone(),
                    body.amount_cents,
                ));
                let response = json!({"invoice_id": id, "status": "issued", "amount_cents": body.amount_cents});
                data.keys.insert(key, (raw, response.clone()));
                response
            }
        }
    };
    if body.reference.starts_with("drop-") {
        // Committed; now lose the response.
        kill.0.notify_one();
        std::future::pending::<()>().await;
    }
    if body.reference.starts_with("slow-") {
        // Committed; the answer never comes (the client's timeout fires).
        std::future::pending::<()>().await;
    }
    (StatusCode::CREATED, Json(response)).into_response()
}

#[derive(Deserialize)]
struct FindInvoices {
    customer_id: String,
    reference: String,
}

async fn find_invoices(
    State(state): State<Arc<Shared>>,
    Query(q): Query<FindInvoices>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authorized(&state, &headers) {
        return r;
    }
    let data = state.data.lock().unwrap_or_else(PoisonError::into_inner);
    let matches: Vec<Value> = data
        .invoices
        .iter()
        .filter(|i| i.1 == q.customer_id && i.2 == q.reference)
        .map(|i| json!({"invoice_id": i.0, "amount_cents": i.3}))
        .collect();
    Json(json!({"reference": q.reference, "count": matches.len(), "invoices": matches}))
        .into_response()
}
