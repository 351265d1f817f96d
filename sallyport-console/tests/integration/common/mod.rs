//! The rig the console tests share: a local upstream that counts requests, an executor with
//! a deferred `send_invoice` over a real SQLite journal file, and the console served on
//! 127.0.0.1:0 by `Console::serve`; plus a plain HTTP/1.1 client that shows every header.

// Each test binary uses a part of the rig.
#![allow(dead_code)]

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use sallyport_console::{Console, LoginToken};
use sallyport_core::approval::ApprovalId;
use sallyport_core::journal::Journal;
use sallyport_core::{Executor, Status};
use sallyport_tests::approvals_rig::{self, HostOptions};
use sallyport_tests::http_server::{Received, Reply, Upstream};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The console user's login token.
pub(crate) const LOGIN: &str = "console-login-token-for-alice-7f3a";

pub(crate) fn reply(r: &Received) -> Reply {
    if r.method == "POST" && r.path == "/v1/invoices" {
        Reply::Idempotent(None)
    } else {
        Reply::Json(200, json!({"id": "inv_x"}))
    }
}

pub(crate) struct Rig {
    pub(crate) upstream: Upstream,
    pub(crate) executor: Executor,
    pub(crate) vault: Arc<sallyport_core::vault::MemoryVault>,
    pub(crate) addr: SocketAddr,
    pub(crate) _dir: tempfile::TempDir,
}

/// Starts the rig with a console over the executor.
pub(crate) async fn rig() -> Rig {
    rig_with(|executor| Console::builder(executor.clone())).await
}

/// Starts the rig with the console `make` builds (user `alice` is added).
pub(crate) async fn rig_with(
    make: impl FnOnce(&Executor) -> sallyport_console::ConsoleBuilder,
) -> Rig {
    rig_at(|executor, _| make(executor), true).await
}

/// Starts the rig with the console `make` builds for the address it will serve on (user
/// `alice` with [`LOGIN`] is added when `token`).
pub(crate) async fn rig_at(
    make: impl FnOnce(&Executor, SocketAddr) -> sallyport_console::ConsoleBuilder,
    token: bool,
) -> Rig {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = HostOptions::new(dir.path().join("journal.db"), upstream.url());
    let vault = approvals_rig::vault(&options.upstream);
    let executor = approvals_rig::executor(&options, Arc::clone(&vault));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut builder = make(&executor, addr);
    if token {
        builder = builder.user("alice", LoginToken::new(LOGIN).expect("token"));
    }
    let console = builder.build().expect("console");
    tokio::spawn(async move { console.serve(listener).await });
    Rig {
        upstream,
        executor,
        vault,
        addr,
        _dir: dir,
    }
}

impl Rig {
    /// The agent's call of invoice `n` with `reason`: parked, its approval id.
    pub(crate) async fn park(&self, n: usize, reason: &str) -> ApprovalId {
        let mut args = approvals_rig::invoice(n);
        args["reason"] = Value::from(reason);
        let result = self
            .executor
            .call("send_invoice", args, &approvals_rig::session())
            .await;
        assert_eq!(result.status, Status::Pending, "{}", result.to_json());
        result.approval_id.expect("approval id")
    }

    pub(crate) fn journal(&self) -> &Arc<dyn Journal> {
        self.executor.journal()
    }

    pub(crate) fn store(&self) -> &Arc<dyn sallyport_core::journal::ApprovalStore> {
        self.executor.approval_store().expect("an approval store")
    }

    /// POSTs the upstream received.
    pub(crate) fn posts(&self) -> usize {
        self.upstream
            .received()
            .iter()
            .filter(|r| r.method == "POST")
            .count()
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) async fn get(&self, path: &str, cookie: Option<&str>) -> Answer {
        http(self.addr, "GET", path, cookie, None).await
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        cookie: Option<&str>,
        form: &[(&str, &str)],
    ) -> Answer {
        http(self.addr, "POST", path, cookie, Some(&urlencode(form))).await
    }

    /// Logs in as alice: the session cookie (`name=value`) and the session's CSRF token.
    pub(crate) async fn login(&self) -> (String, String) {
        login_at(self.addr, LOGIN).await
    }
}

/// Logs in to the console at `addr` with `token`: the session cookie and its CSRF token.
pub(crate) async fn login_at(addr: SocketAddr, token: &str) -> (String, String) {
    let page = http(addr, "GET", "/login", None, None).await;
    assert_eq!(page.status, 200);
    let nonce_cookie = page
        .cookie("sallyport_console_login")
        .expect("login cookie");
    let nonce = page.csrf().expect("login csrf");
    let form = urlencode(&[("csrf", &nonce), ("token", token)]);
    let answer = http(addr, "POST", "/login", Some(&nonce_cookie), Some(&form)).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(answer.header("location"), Some("/approvals"));
    let cookie = answer.cookie("sallyport_console").expect("session cookie");
    let page = http(addr, "GET", "/approvals", Some(&cookie), None).await;
    assert_eq!(page.status, 200);
    let csrf = page.csrf().expect("csrf");
    (cookie, csrf)
}

/// One login attempt with `token` from the local address `from`, through the login form.
pub(crate) async fn try_login_from(
    from: Option<std::net::IpAddr>,
    addr: SocketAddr,
    token: &str,
) -> Answer {
    let page = http_from(from, addr, "GET", "/login", None, None).await;
    assert_eq!(page.status, 200);
    let nonce_cookie = page
        .cookie("sallyport_console_login")
        .expect("login cookie");
    let nonce = page.csrf().expect("login csrf");
    let form = urlencode(&[("csrf", &nonce), ("token", token)]);
    http_from(
        from,
        addr,
        "POST",
        "/login",
        Some(&nonce_cookie),
        Some(&form),
    )
    .await
}

/// An HTTP answer, every header kept.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every `Set-Cookie` header.
    pub(crate) fn set_cookies(&self) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// `name=value` of the cookie `name` this answer sets (with a value).
    pub(crate) fn cookie(&self, name: &str) -> Option<String> {
        self.set_cookies()
            .into_iter()
            .filter_map(|c| c.split(';').next())
            .find(|c| c.starts_with(&format!("{name}=")) && c.len() > name.len() + 1)
            .map(str::to_owned)
    }

    /// The first CSRF token in the page's forms.
    pub(crate) fn csrf(&self) -> Option<String> {
        let marker = "name=\"csrf\" value=\"";
        let start = self.body.find(marker)? + marker.len();
        let end = self.body[start..].find('"')?;
        Some(self.body[start..start + end].to_owned())
    }
}

pub(crate) fn urlencode(form: &[(&str, &str)]) -> String {
    form.iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// One request over a fresh connection (`Connection: close`), read to its end.
pub(crate) async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    body: Option<&str>,
) -> Answer {
    http_from(None, addr, method, path, cookie, body).await
}

/// [`http`] from the local address `from` (another loopback address is another client:
/// Linux routes all of 127.0.0.0/8 to loopback).
pub(crate) async fn http_from(
    from: Option<std::net::IpAddr>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    body: Option<&str>,
) -> Answer {
    let mut stream = match from {
        None => tokio::net::TcpStream::connect(addr).await.expect("connect"),
        Some(local) => {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket
                .bind(SocketAddr::new(local, 0))
                .expect("bind the client address");
            socket.connect(addr).await.expect("connect")
        }
    };
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(cookie) = cookie {
        request.push_str(&format!("Cookie: {cookie}\r\n"));
    }
    let body = body.unwrap_or("");
    if method == "POST" {
        request.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8(raw).expect("utf-8 answer");
    let (head, rest) = text.split_once("\r\n\r\n").expect("head");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    Answer {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    out
}

/// Where a test's tracing lines go (a `tracing_subscriber` writer), to read them back.
#[derive(Clone, Default)]
pub(crate) struct Sink(Arc<Mutex<Vec<u8>>>);

impl Sink {
    /// Everything written so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
        .expect("utf-8 log")
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
