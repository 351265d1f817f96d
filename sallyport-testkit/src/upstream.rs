//! The fault-injecting upstream: a real HTTP server on `127.0.0.1:0`, in the same process,
//! that answers every method and path, counts every request it receives and logs when each
//! arrived on the check's [`Timeline`], and answers as the check's [`Fault`] says.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The longest a hanging reply waits when the upstream is not dropped first.
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// One check's order of events: consent asks and upstream requests draw numbers from it.
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    next: AtomicU64,
}

impl Timeline {
    /// The next event number (1-based).
    pub(crate) fn tick(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// How the upstream answers.
#[derive(Clone, Debug)]
pub(crate) enum Fault {
    /// Answer `status` with a JSON body.
    Answer(u16, Value),
    /// Commit the request (count it), then never answer: the client's timeout fires.
    CommitThenHang,
    /// `401`, with a body that echoes the `Authorization` header it received.
    Unauthorized,
}

/// One request as the upstream received it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// Its number on the check's timeline.
    pub(crate) at: u64,
    /// The method.
    pub(crate) method: String,
    /// The path and query, as sent.
    pub(crate) target: String,
    /// The `Idempotency-Key` header, if any.
    pub(crate) idempotency_key: Option<String>,
}

struct Shared {
    fault: Fault,
    timeline: Arc<Timeline>,
    seen: Mutex<Vec<Seen>>,
    shutdown: watch::Receiver<bool>,
}

/// A running upstream. Dropping it stops the server and ends every hanging reply.
pub(crate) struct Upstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.task.abort();
    }
}

impl Upstream {
    /// Starts a server on a free loopback port that answers with `fault`.
    pub(crate) async fn start(fault: Fault, timeline: Arc<Timeline>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, shutdown) = watch::channel(false);
        let shared = Arc::new(Shared {
            fault,
            timeline,
            seen: Mutex::new(Vec::new()),
            shutdown,
        });
        let router = Router::new()
            .fallback(answer)
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self {
            addr,
            shared,
            stop,
            task,
        })
    }

    /// The base URL (`http://127.0.0.1:PORT`).
    pub(crate) fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many requests arrived.
    pub(crate) fn requests(&self) -> usize {
        self.shared
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

async fn answer(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    _body: Bytes,
) -> Response {
    let seen = Seen {
        at: shared.timeline.tick(),
        method: method.to_string(),
        target: uri
            .path_and_query()
            .map_or_else(|| uri.path().to_owned(), ToString::to_string),
        idempotency_key: headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    };
    shared
        .seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(seen);
    match &shared.fault {
        Fault::Answer(status, body) => (
            StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            axum::Json(body.clone()),
        )
            .into_response(),
        Fault::CommitThenHang => {
            let mut shutdown = shared.shutdown.clone();
            tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => {}
                () = tokio::time::sleep(HANG_LIMIT) => {}
            }
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        Fault::Unauthorized => {
            let echoed = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({
                    "message": format!("token revoked: {echoed}"),
                    "authorization": echoed,
                })),
            )
                .into_response()
        }
    }
}
