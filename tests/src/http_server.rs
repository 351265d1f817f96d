//! A real HTTP upstream for the HTTP channel's tests: axum on `127.0.0.1:0`, counting every
//! request that reaches it and every side effect it commits, and able to inject every HTTP
//! fault in RELIABILITY.md: commit-then-drop four ways (clean close, TCP reset, hang,
//! half-written response), 401/403, the Idempotency-Key draft's 409/422/400, 429 with any
//! `Retry-After`, redirects, business errors inside a 200, oversized and trickling bodies,
//! echoed credentials and stack traces.
//!
//! Each test installs a [`Behaviour`]: a function from the received request to a [`Reply`].
//! [`Upstream::set_delay`] makes every reply wait, as a real API takes time to answer.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::serve::{IncomingStream, Listener};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One request as the upstream received it.
#[derive(Clone, Debug)]
pub struct Received {
    /// 1-based arrival number.
    pub n: u64,
    /// The method.
    pub method: String,
    /// The path, exactly as sent (still percent-encoded).
    pub path: String,
    /// The raw query string.
    pub query: Option<String>,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body bytes.
    pub body: Bytes,
    /// When it arrived (tokio time, so paused-time tests see exact waits).
    pub at: tokio::time::Instant,
}

impl Received {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How a commit-then-drop fault ends the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drop {
    /// FIN without a response byte.
    CleanClose,
    /// RST (`SO_LINGER` 0) without a response byte.
    Reset,
    /// No answer for this long, then a clean close.
    Hang(Duration),
    /// The status line and headers, then half the body, then a clean close.
    HalfWritten,
}

/// What the upstream answers.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A JSON body with a status.
    Json(u16, Value),
    /// A JSON body with a status and extra headers.
    JsonWith(u16, Value, Vec<(String, String)>),
    /// Raw bytes with a status and headers.
    Raw(u16, Vec<(String, String)>, Bytes),
    /// The IETF Idempotency-Key draft: 400 without a key, 409 while the key's original is in
    /// flight, 422 for the key with another payload, a replay of the stored response for the
    /// same payload; otherwise commit one side effect and answer `201 {"id": …}`. With a
    /// fault, the side effect is committed first and then the connection is dropped.
    Idempotent(Option<Drop>),
    /// Commit one side effect (no key handling), then drop the connection.
    CommitThenDrop(Drop),
    /// Drop the connection after reading the full request, without committing anything.
    DropBeforeCommit(Drop),
    /// Like `Idempotent`, with one fault for the key's original request and another for
    /// a replay of it.
    IdempotentFaults {
        /// Fault after committing the original.
        original: Option<Drop>,
        /// Fault after deciding to replay.
        replay: Option<Drop>,
    },
    /// Like `Idempotent`, but the original stays "in flight" for this long before the
    /// response is stored and the connection closed.
    IdempotentSlow(Duration),
    /// `chunks` chunks of `chunk` bytes, one every `every`, no `Content-Length`.
    Trickle {
        /// Status.
        status: u16,
        /// Bytes per chunk.
        chunk: usize,
        /// Pause between chunks.
        every: Duration,
        /// How many chunks (use `usize::MAX` for a never-ending body).
        chunks: usize,
    },
    /// `body` sent in pieces of `chunk` bytes, each written on its own after a yield, no
    /// `Content-Length`.
    Chunked {
        /// Status.
        status: u16,
        /// The whole body.
        body: Bytes,
        /// Bytes per piece.
        chunk: usize,
    },
}

/// Decides the reply for each request.
pub type Behaviour = Arc<dyn Fn(&Received) -> Reply + Send + Sync>;

#[derive(Debug)]
enum Stored {
    InFlight,
    Done(Bytes, u16, Value),
}

struct Shared {
    requests: AtomicU64,
    connections: AtomicU64,
    effects: Mutex<HashMap<String, u32>>,
    faults: AtomicU64,
    fault_modes: Mutex<HashMap<&'static str, u64>>,
    log: Mutex<Vec<Received>>,
    keep_log: bool,
    store: Mutex<HashMap<String, Stored>>,
    behaviour: Mutex<Behaviour>,
    /// How long every reply waits after the request arrived, in nanoseconds (0: none).
    delay_nanos: AtomicU64,
    /// The delay thread, started by the first delayed reply (`None`: it could not start).
    timer: std::sync::OnceLock<Option<DelayTimer>>,
}

/// Wakes delayed replies at their deadlines from a thread of its own, to within the
/// kernel's timer slack (tens of microseconds), where tokio's timer rounds every wait up to
/// its next whole-millisecond tick. On tokio's timer the upstream and a client on the same
/// runtime wake on the same ticks, so a reply's wait would depend on when, within a
/// millisecond, its request happened to arrive: a real API's answer time does not.
struct DelayTimer {
    due: std::sync::mpsc::Sender<(Instant, tokio::sync::oneshot::Sender<()>)>,
}

impl DelayTimer {
    /// Starts the timer thread; it ends when the timer is dropped.
    fn start() -> io::Result<Self> {
        let (due, waiting) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("upstream-delay".into())
            .spawn(move || run_delay_timer(&waiting))?;
        Ok(Self { due })
    }

    /// Resolves at `deadline`.
    async fn wait_until(&self, deadline: Instant) {
        let (wake, woken) = tokio::sync::oneshot::channel();
        if self.due.send((deadline, wake)).is_ok() {
            let _ = woken.await;
        }
    }
}

/// The timer thread: sleeps until the earliest deadline (or a new one), then wakes every
/// reply that is due.
fn run_delay_timer(
    waiting: &std::sync::mpsc::Receiver<(Instant, tokio::sync::oneshot::Sender<()>)>,
) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    use std::sync::mpsc::RecvTimeoutError;

    let mut due: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut wakers: HashMap<u64, tokio::sync::oneshot::Sender<()>> = HashMap::new();
    let mut next_id = 0_u64;
    loop {
        let now = Instant::now();
        while let Some(Reverse((deadline, id))) = due.peek().copied() {
            if deadline > now {
                break;
            }
            due.pop();
            if let Some(wake) = wakers.remove(&id) {
                let _ = wake.send(());
            }
        }
        let received = match due.peek() {
            Some(Reverse((deadline, _))) => {
                waiting.recv_timeout(deadline.saturating_duration_since(now))
            }
            None => waiting.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match received {
            Ok((deadline, wake)) => {
                due.push(Reverse((deadline, next_id)));
                wakers.insert(next_id, wake);
                next_id += 1;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Waits until `delay` after `arrived`: on the delay thread, or (if it could not be
/// started) on tokio's timer, which may wait up to a millisecond longer. Never shorter.
async fn wait_for(shared: &Shared, arrived: Instant, delay: Duration) {
    let deadline = arrived + delay;
    match shared.timer.get_or_init(|| DelayTimer::start().ok()) {
        Some(timer) => timer.wait_until(deadline).await,
        None => tokio::time::sleep_until(deadline.into()).await,
    }
}

/// A running upstream. Dropping it stops the server.
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl std::ops::Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    /// Starts an upstream that answers every request with `behaviour`.
    pub async fn start(behaviour: impl Fn(&Received) -> Reply + Send + Sync + 'static) -> Self {
        Self::start_with(behaviour, true).await
    }

    /// Starts an upstream; `keep_log` false keeps no per-request log (long fault loops).
    pub async fn start_with(
        behaviour: impl Fn(&Received) -> Reply + Send + Sync + 'static,
        keep_log: bool,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            requests: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            effects: Mutex::new(HashMap::new()),
            faults: AtomicU64::new(0),
            fault_modes: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
            keep_log,
            store: Mutex::new(HashMap::new()),
            behaviour: Mutex::new(Arc::new(behaviour)),
            delay_nanos: AtomicU64::new(0),
            timer: std::sync::OnceLock::new(),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let listener = FaultListener {
            inner: listener,
            shared: Arc::clone(&shared),
        };
        let task = tokio::spawn(async move {
            let _ = axum::serve(
                listener,
                app.into_make_service_with_connect_info::<ConnHandle>(),
            )
            .await;
        });
        Self { addr, shared, task }
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Replaces the behaviour.
    pub fn set_behaviour(&self, behaviour: impl Fn(&Received) -> Reply + Send + Sync + 'static) {
        *self
            .shared
            .behaviour
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(behaviour);
    }

    /// Makes every later reply wait `delay` after its request arrived (counted and logged at
    /// once), then answer as the behaviour says: an upstream that takes time, such as a fast
    /// real API at a few milliseconds. `Duration::ZERO` (the default) answers at once.
    pub fn set_delay(&self, delay: Duration) {
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.shared.delay_nanos.store(nanos, Ordering::SeqCst);
    }

    /// Requests that reached the upstream (request head parsed, handler entered).
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// TCP connections accepted.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Faults injected (connections dropped after a commit).
    pub fn faults(&self) -> u64 {
        self.shared.faults.load(Ordering::SeqCst)
    }

    /// Faults injected, by kind (`clean_close`, `reset`, `hang`, `half_written`).
    pub fn fault_modes(&self) -> HashMap<&'static str, u64> {
        self.shared
            .fault_modes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Side effects committed, per idempotency key (or `req-N` without a key).
    pub fn effects(&self) -> HashMap<String, u32> {
        self.shared
            .effects
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Total side effects committed.
    pub fn effect_count(&self) -> u64 {
        self.effects().values().map(|n| u64::from(*n)).sum()
    }

    /// Every request received, in order (empty when started without a log).
    pub fn received(&self) -> Vec<Received> {
        self.shared
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let arrived = Instant::now();
    let n = shared.requests.fetch_add(1, Ordering::SeqCst) + 1;
    let received = Received {
        n,
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
        at: tokio::time::Instant::now(),
    };
    if shared.keep_log {
        shared
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(received.clone());
    }
    let behaviour = Arc::clone(
        &shared
            .behaviour
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let reply = behaviour(&received);
    let delay = shared.delay_nanos.load(Ordering::SeqCst);
    if delay > 0 {
        wait_for(&shared, arrived, Duration::from_nanos(delay)).await;
    }
    respond(&shared, &conn, &received, reply).await
}

fn commit(shared: &Shared, key: &str) {
    *shared
        .effects
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(key.to_owned())
        .or_insert(0) += 1;
}

async fn respond(
    shared: &Shared,
    conn: &ConnHandle,
    received: &Received,
    reply: Reply,
) -> Response {
    match reply {
        Reply::Json(status, body) => json_response(status, &body, &[]),
        Reply::JsonWith(status, body, headers) => json_response(status, &body, &headers),
        Reply::Raw(status, headers, body) => raw(status, &headers, body),
        Reply::CommitThenDrop(mode) => {
            commit(shared, &format!("req-{}", received.n));
            drop_connection(shared, conn, mode).await
        }
        Reply::DropBeforeCommit(mode) => drop_connection(shared, conn, mode).await,
        Reply::Idempotent(fault) => idempotent(shared, conn, received, (fault, fault), None).await,
        Reply::IdempotentFaults { original, replay } => {
            idempotent(shared, conn, received, (original, replay), None).await
        }
        Reply::IdempotentSlow(d) => idempotent(shared, conn, received, (None, None), Some(d)).await,
        Reply::Trickle {
            status,
            chunk,
            every,
            chunks,
        } => {
            let stream = futures_util::stream::unfold(0usize, move |sent| async move {
                if sent >= chunks {
                    return None;
                }
                if sent > 0 && !every.is_zero() {
                    tokio::time::sleep(every).await;
                }
                Some((Ok::<_, io::Error>(Bytes::from(vec![b'a'; chunk])), sent + 1))
            });
            let mut r = Response::new(Body::from_stream(stream));
            *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            r
        }
        Reply::Chunked {
            status,
            body,
            chunk,
        } => {
            let chunk = chunk.max(1);
            let stream = futures_util::stream::unfold(body, move |mut left| async move {
                if left.is_empty() {
                    return None;
                }
                tokio::task::yield_now().await;
                let piece = left.split_to(chunk.min(left.len()));
                Some((Ok::<_, io::Error>(piece), left))
            });
            let mut r = Response::new(Body::from_stream(stream));
            *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            r
        }
    }
}

async fn idempotent(
    shared: &Shared,
    conn: &ConnHandle,
    received: &Received,
    (fault, replay_fault): (Option<Drop>, Option<Drop>),
    slow: Option<Duration>,
) -> Response {
    let Some(key) = received.header("idempotency-key").map(str::to_owned) else {
        return json_response(
            400,
            &json!({"type": "https://example.invalid/idempotency-key-missing",
                    "title": "Idempotency-Key is missing", "message": "this operation requires an Idempotency-Key header"}),
            &[],
        );
    };
    let fingerprint = received.body.clone();
    let stored = {
        let mut store = shared.store.lock().unwrap_or_else(PoisonError::into_inner);
        match store.get(&key) {
            None => {
                store.insert(key.clone(), Stored::InFlight);
                None
            }
            Some(Stored::InFlight) => Some(Err(409)),
            Some(Stored::Done(fp, _, _)) if *fp != fingerprint => Some(Err(422)),
            Some(Stored::Done(_, status, body)) => Some(Ok((*status, body.clone()))),
        }
    };
    match stored {
        Some(Err(409)) => {
            return json_response(
                409,
                &json!({"title": "A request with this Idempotency-Key is still being processed",
                        "message": "idempotency key in use"}),
                &[],
            );
        }
        Some(Err(_)) => {
            return json_response(
                422,
                &json!({"title": "Idempotency-Key reused with a different payload",
                        "message": "idempotency key mismatch"}),
                &[],
            );
        }
        Some(Ok((status, body))) => {
            let r = json_response(
                status,
                &body,
                &[("idempotent-replayed".into(), "true".into())],
            );
            return match replay_fault {
                Some(mode) => drop_connection(shared, conn, mode).await,
                None => r,
            };
        }
        None => {}
    }
    commit(shared, &key);
    let resource = json!({"id": format!("res_{}", received.n), "state": "created"});
    if let Some(d) = slow {
        tokio::time::sleep(d).await;
    }
    shared
        .store
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, Stored::Done(fingerprint, 201, resource.clone()));
    match fault {
        Some(mode) => drop_connection(shared, conn, mode).await,
        None => json_response(201, &resource, &[]),
    }
}

async fn drop_connection(shared: &Shared, conn: &ConnHandle, mode: Drop) -> Response {
    shared.faults.fetch_add(1, Ordering::SeqCst);
    let name = match mode {
        Drop::CleanClose => "clean_close",
        Drop::Reset => "reset",
        Drop::Hang(_) => "hang",
        Drop::HalfWritten => "half_written",
    };
    *shared
        .fault_modes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(name)
        .or_insert(0) += 1;
    match mode {
        Drop::CleanClose => conn.set(MODE_CLOSE),
        Drop::Reset => conn.set(MODE_RESET),
        Drop::Hang(d) => {
            tokio::time::sleep(d).await;
            conn.set(MODE_CLOSE);
        }
        Drop::HalfWritten => {
            conn.set(MODE_HALF);
            return json_response(
                201,
                &json!({"id": "res_half", "state": "created", "padding": "x".repeat(200)}),
                &[],
            );
        }
    }
    json_response(201, &json!({"never": "sent"}), &[])
}

fn json_response(status: u16, body: &Value, headers: &[(String, String)]) -> Response {
    raw(
        status,
        &[
            &[("content-type".to_owned(), "application/json".to_owned())][..],
            headers,
        ]
        .concat(),
        Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
    )
}

fn raw(status: u16, headers: &[(String, String)], body: Bytes) -> Response {
    let mut r = body.into_response();
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            r.headers_mut().append(k, v);
        }
    }
    r
}

const MODE_NORMAL: u8 = 0;
const MODE_CLOSE: u8 = 1;
const MODE_RESET: u8 = 2;
const MODE_HALF: u8 = 3;

/// The handler's handle on its connection, to inject a fault.
#[derive(Clone, Debug)]
pub struct ConnHandle {
    mode: Arc<AtomicU8>,
}

impl ConnHandle {
    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }
}

impl axum::extract::connect_info::Connected<IncomingStream<'_, FaultListener>> for ConnHandle {
    fn connect_info(stream: IncomingStream<'_, FaultListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// Accepts TCP connections wrapped in a [`FaultyStream`].
pub struct FaultListener {
    inner: TcpListener,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FaultListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultListener").finish_non_exhaustive()
    }
}

impl Listener for FaultListener {
    type Io = FaultyStream;
    type Addr = ConnHandle;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if let Ok((stream, _)) = self.inner.accept().await {
                let _ = stream.set_nodelay(true);
                self.shared.connections.fetch_add(1, Ordering::SeqCst);
                let mode = Arc::new(AtomicU8::new(MODE_NORMAL));
                return (
                    FaultyStream {
                        inner: stream,
                        mode: Arc::clone(&mode),
                        tail: [0; 4],
                        body_left: None,
                        written: AtomicUsize::new(0),
                    },
                    ConnHandle { mode },
                );
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(ConnHandle {
            mode: Arc::new(AtomicU8::new(MODE_NORMAL)),
        })
    }
}

/// A TCP stream whose writes can be cut: closed before any response byte, reset, or cut
/// halfway through the response body.
pub struct FaultyStream {
    inner: TcpStream,
    mode: Arc<AtomicU8>,
    tail: [u8; 4],
    body_left: Option<usize>,
    written: AtomicUsize,
}

impl std::fmt::Debug for FaultyStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyStream").finish_non_exhaustive()
    }
}

/// `Poll::Ready(Ok(n))` → `Ok(n)`; pending or errors are returned early by the caller's `?`.
fn ready(p: Poll<io::Result<usize>>) -> io::Result<usize> {
    match p {
        Poll::Ready(r) => r,
        // The socket is loopback with a large buffer; a pending small write is treated as a
        // failed one, which only shortens the injected fault further.
        Poll::Pending => Err(io::Error::new(io::ErrorKind::WouldBlock, "pending")),
    }
}

fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "fault injected")
}

impl AsyncRead for FaultyStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for FaultyStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.mode.load(Ordering::SeqCst) {
            MODE_CLOSE => Poll::Ready(Err(broken())),
            MODE_RESET => {
                let _ = self.inner.set_zero_linger();
                Poll::Ready(Err(broken()))
            }
            MODE_HALF => {
                // Let the head through, then 120 bytes of the body, then fail.
                let this = &mut *self;
                if let Some(left) = this.body_left {
                    if left == 0 {
                        return Poll::Ready(Err(broken()));
                    }
                    let allowed = buf.len().min(left);
                    let n = ready(Pin::new(&mut this.inner).poll_write(cx, &buf[..allowed]))?;
                    this.body_left = Some(left - n.min(left));
                    return Poll::Ready(Ok(n));
                }
                let mut head_end = None;
                for (i, b) in buf.iter().enumerate() {
                    this.tail = [this.tail[1], this.tail[2], this.tail[3], *b];
                    if &this.tail == b"\r\n\r\n" {
                        head_end = Some(i + 1);
                        break;
                    }
                }
                let allowed = head_end.map_or(buf.len(), |h| buf.len().min(h + 120));
                let n = ready(Pin::new(&mut this.inner).poll_write(cx, &buf[..allowed]))?;
                if let Some(h) = head_end {
                    this.body_left = Some(120usize.saturating_sub(n.saturating_sub(h)));
                }
                this.written.fetch_add(n, Ordering::SeqCst);
                Poll::Ready(Ok(n))
            }
            _ => Pin::new(&mut self.inner).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Reads the SQLite journal file directly: `attempts.dispatches` of one attempt (0 when the
/// attempt never wrote an intent).
pub fn journal_dispatches(path: &std::path::Path, attempt_id: &str) -> u32 {
    let conn = rusqlite::Connection::open(path).expect("open journal");
    conn.query_row(
        "SELECT dispatches FROM attempts WHERE attempt_id = ?1",
        [attempt_id],
        |r| r.get(0),
    )
    .unwrap_or(0)
}

/// Reads the SQLite journal file directly: the sum of `attempts.dispatches`.
pub fn journal_total_dispatches(path: &std::path::Path) -> u64 {
    let conn = rusqlite::Connection::open(path).expect("open journal");
    conn.query_row(
        "SELECT COALESCE(SUM(dispatches), 0) FROM attempts",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map_or(0, |n| u64::try_from(n).unwrap_or(0))
}

/// Reads the SQLite journal file directly: the audit event of one attempt, as JSON.
pub fn audit_event(path: &std::path::Path, attempt_id: &str) -> Value {
    let conn = rusqlite::Connection::open(path).expect("open journal");
    let text: String = conn
        .query_row(
            "SELECT event FROM audit WHERE attempt_id = ?1 ORDER BY seq DESC LIMIT 1",
            [attempt_id],
            |r| r.get(0),
        )
        .expect("an audit record for the attempt");
    serde_json::from_str(&text).expect("audit JSON")
}

/// Every stored audit event and attempt row, as one string (to search for canaries).
pub fn journal_text(path: &std::path::Path) -> String {
    let conn = rusqlite::Connection::open(path).expect("open journal");
    let mut out = String::new();
    for sql in [
        "SELECT event FROM audit",
        "SELECT arguments || ' ' || COALESCE(status, '') FROM attempts",
    ] {
        let mut stmt = conn.prepare(sql).expect("prepare");
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .expect("query");
        for row in rows.flatten() {
            out.push_str(&row);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One `GET /` over a fresh connection; the status line.
    async fn get(upstream: &Upstream) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = TcpStream::connect(upstream.addr).await.expect("connect");
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: upstream\r\nconnection: close\r\n\r\n")
            .await
            .expect("send");
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.expect("read");
        let text = String::from_utf8_lossy(&response).into_owned();
        text.lines().next().unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn a_delayed_upstream_answers_no_sooner_than_its_delay() {
        let upstream = Upstream::start(|_| Reply::Json(200, json!({"ok": true}))).await;
        let started = std::time::Instant::now();
        assert_eq!(get(&upstream).await, "HTTP/1.1 200 OK");
        let undelayed = started.elapsed();
        upstream.set_delay(Duration::from_millis(150));
        let started = std::time::Instant::now();
        assert_eq!(get(&upstream).await, "HTTP/1.1 200 OK");
        let delayed = started.elapsed();
        assert!(
            delayed >= Duration::from_millis(150),
            "answered after {delayed:?}, before the 150 ms delay"
        );
        assert!(
            undelayed < Duration::from_millis(150),
            "the default answers at once, took {undelayed:?}"
        );
        upstream.set_delay(Duration::ZERO);
        assert_eq!(get(&upstream).await, "HTTP/1.1 200 OK");
        assert_eq!(upstream.requests(), 3);
    }
}
