//! Nothing is lost from the vault when a user's token endpoint misbehaves: for each fault
//! (down, slower than the timeout, garbage, an HTML page with `200`) a refresh grant's call
//! is refused with a reason that names the fault, nothing reaches the API, the grant keeps
//! its refresh token and is not marked for reconnection, and once the endpoint answers
//! again the next call refreshes with that same refresh token and goes through. And a
//! refresh answered without a new refresh token keeps the old one, which works next time.
//!
//! The token endpoint is a real HTTP server on 127.0.0.1 (for "down", a port nothing listens
//! on until the fault clears); the API is another.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sallyport_core::Status;
use sallyport_core::code::RefusalCode;
use sallyport_core::outcome::ActionResult;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, GrantKey, GrantUpdate, MemoryVault, OAuthClient,
    Secret, Vault,
};
use sallyport_tests::http_server::{Received, Reply, Upstream};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::oauth_rig::{OAuthRig, oauth_rig};

const CLIENT_SECRET: &str = "client-secret-canary-77c2";
const FIRST_REFRESH: &str = "rt-canary-1";

/// A provider that rotates: the n-th answer holds `at-canary-n` and `rt-canary-(n+1)`.
fn rotating() -> impl Fn() -> Value + Send + Sync + 'static {
    let n = AtomicU32::new(0);
    move || {
        let i = n.fetch_add(1, Ordering::SeqCst) + 1;
        json!({
            "access_token": format!("at-canary-{i}"),
            "token_type": "Bearer",
            "expires_in": 60,
            "refresh_token": format!("rt-canary-{}", i + 1),
        })
    }
}

/// A rig whose `api` credential is a refresh grant against `token_endpoint`, connected with
/// [`FIRST_REFRESH`].
async fn connected(token_endpoint: &str, api: &Upstream, token_timeout: Duration) -> OAuthRig {
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "api",
            CredentialKind::OAuthRefresh(OAuthClient::new("client-1", token_endpoint)),
            Binding::url(api.url()),
        ),
        Secret::new(CLIENT_SECRET),
    );
    let vault: Arc<dyn Vault> = vault;
    let rig = oauth_rig(vault, |b| b.token_timeout(token_timeout), Duration::ZERO);
    rig.add_canary(CLIENT_SECRET);
    for i in 1..=4 {
        rig.add_canary(&format!("at-canary-{i}"));
        rig.add_canary(&format!("rt-canary-{i}"));
    }
    rig.store()
        .put(
            &GrantKey::shared("api"),
            GrantUpdate::Connected {
                refresh_token: Secret::new(FIRST_REFRESH),
            },
        )
        .await
        .expect("connect");
    rig
}

fn assert_refused(r: &ActionResult, words: &str) {
    assert_eq!(r.status, Status::Rejected, "{}", r.to_json());
    assert_eq!(
        r.code.as_ref().map(|c| c.as_str()),
        Some(RefusalCode::CredentialUnavailable.as_str()),
        "{}",
        r.to_json()
    );
    let reason = r.reason.as_deref().unwrap_or_default();
    assert!(reason.contains(words), "{reason}");
    assert!(reason.contains("nothing was sent"), "{reason}");
    assert!(reason.contains("may be made again later"), "{reason}");
}

/// The grant as the fault left it: still the connected one, not marked.
async fn assert_grant_kept(rig: &OAuthRig) {
    let grant = rig.grant().await;
    assert_eq!(grant.version(), 1, "{grant:?}");
    assert_eq!(
        grant.refresh_token().map(Secret::expose),
        Some(FIRST_REFRESH)
    );
    assert!(grant.access_token().is_none());
    assert_eq!(grant.reconnect_reason(), None);
}

/// After the fault cleared: the call goes through with the token the kept refresh token
/// bought, and the grant holds the rotated one.
async fn assert_works_again(rig: &OAuthRig, api: &Upstream, token: &Upstream) {
    let before = token.requests();
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(token.requests(), before + 1, "one refresh");
    // Every request the endpoint saw, the faulty ones too, presented the connected token.
    let refresh_bodies = bodies(token);
    assert_eq!(refresh_bodies.len() as u64, before + 1);
    assert!(
        refresh_bodies
            .iter()
            .all(|b| b == "grant_type=refresh_token&refresh_token=rt-canary-1"),
        "{refresh_bodies:?}"
    );
    let sent: Vec<String> = api
        .received()
        .iter()
        .map(|r| r.header("authorization").unwrap_or_default().to_owned())
        .collect();
    assert_eq!(sent.len(), 1);
    assert!(sent[0].starts_with("Bearer at-canary-"), "{sent:?}");
    let grant = rig.grant().await;
    assert_eq!(grant.version(), 2);
    assert!(
        grant
            .refresh_token()
            .is_some_and(|t| t.expose() != FIRST_REFRESH),
        "rotated"
    );
}

/// The body of one HTTP/1.1 request (headers up to the blank line, then `content-length`
/// bytes).
async fn read_request_body(conn: &mut tokio::net::TcpStream) -> String {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = conn.read(&mut buf).await.expect("read");
        assert!(n > 0, "the request ended early");
        bytes.extend_from_slice(&buf[..n]);
        let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if bytes.len() >= end + 4 + length {
            return String::from_utf8_lossy(&bytes[end + 4..end + 4 + length]).into_owned();
        }
    }
}

fn api_ok() -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    |_| Reply::Json(200, json!({"id": "i1", "state": "ok"}))
}

fn bodies(token: &Upstream) -> Vec<String> {
    token
        .received()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

/// A token endpoint on `upstream` that answers `fault` until `set_behaviour` clears it.
async fn faulty(fault: Reply) -> Upstream {
    Upstream::start(move |_| fault.clone()).await
}

fn heal(token: &Upstream) {
    let issue = rotating();
    token.set_behaviour(move |_| Reply::Json(200, issue()));
    token.set_delay(Duration::ZERO);
}

#[tokio::test]
async fn a_refresh_grant_outlives_a_token_endpoint_that_is_down_and_works_when_it_is_back() {
    let api = Upstream::start(api_ok()).await;
    let reserved = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = reserved.local_addr().expect("addr");
    drop(reserved);
    let rig = connected(
        &format!("http://{addr}/token"),
        &api,
        Duration::from_secs(5),
    )
    .await;
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_refused(&r, "the token endpoint could not be reached");
    assert_eq!(api.requests(), 0);
    assert_grant_kept(&rig).await;
    // The provider comes back on its port: a plain HTTP/1.1 token endpoint that records
    // each request's body and answers the rotating provider's JSON, one request a
    // connection.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("the provider's port again");
    let log = Arc::clone(&seen);
    let server = tokio::spawn(async move {
        let issue = rotating();
        while let Ok((mut conn, _)) = listener.accept().await {
            let body = read_request_body(&mut conn).await;
            log.lock().expect("log").push(body);
            let answer = issue().to_string();
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
            let _ = conn.write_all(reply.as_bytes()).await;
            let _ = conn.shutdown().await;
        }
    });
    let refresh_bodies = seen.lock().expect("log").clone();
    assert!(refresh_bodies.is_empty());
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    let refresh_bodies = seen.lock().expect("log").clone();
    assert_eq!(refresh_bodies.len(), 1);
    assert_eq!(
        refresh_bodies[0],
        "grant_type=refresh_token&refresh_token=rt-canary-1"
    );
    assert_eq!(api.requests(), 1);
    assert_eq!(
        api.received()[0].header("authorization"),
        Some("Bearer at-canary-1")
    );
    let grant = rig.grant().await;
    assert_eq!(
        grant.refresh_token().map(Secret::expose),
        Some("rt-canary-2")
    );
    server.abort();
}

#[tokio::test]
async fn a_refresh_grant_outlives_a_token_endpoint_slower_than_the_timeout() {
    let api = Upstream::start(api_ok()).await;
    let token = faulty(Reply::Json(200, rotating()())).await;
    token.set_delay(Duration::from_secs(3));
    let rig = connected(
        &format!("{}/token", token.url()),
        &api,
        Duration::from_millis(300),
    )
    .await;
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_refused(&r, "did not answer within 300 ms");
    assert_eq!(api.requests(), 0);
    assert_grant_kept(&rig).await;
    heal(&token);
    assert_works_again(&rig, &api, &token).await;
}

#[tokio::test]
async fn a_refresh_grant_outlives_garbage_from_the_token_endpoint() {
    let api = Upstream::start(api_ok()).await;
    let token = faulty(Reply::Raw(
        200,
        vec![("content-type".into(), "application/json".into())],
        bytes::Bytes::from_static(b"{\"access_token\": \"at-canary-1\", \"tok"),
    ))
    .await;
    let rig = connected(
        &format!("{}/token", token.url()),
        &api,
        Duration::from_secs(5),
    )
    .await;
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_refused(&r, "is not an OAuth token response");
    assert_eq!(api.requests(), 0);
    assert_grant_kept(&rig).await;
    heal(&token);
    assert_works_again(&rig, &api, &token).await;
    assert_eq!(token.requests(), 2);
}

#[tokio::test]
async fn a_refresh_grant_outlives_an_html_page_answered_with_200() {
    let api = Upstream::start(api_ok()).await;
    let token = faulty(Reply::Raw(
        200,
        vec![("content-type".into(), "text/html; charset=utf-8".into())],
        bytes::Bytes::from_static(
            b"<!doctype html><html><body><form>Sign in to continue</form></body></html>",
        ),
    ))
    .await;
    let rig = connected(
        &format!("{}/token", token.url()),
        &api,
        Duration::from_secs(5),
    )
    .await;
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_refused(&r, "is not an OAuth token response");
    assert_eq!(api.requests(), 0);
    assert_grant_kept(&rig).await;
    heal(&token);
    assert_works_again(&rig, &api, &token).await;
    assert_eq!(token.requests(), 2);
}

#[tokio::test]
async fn a_refresh_without_a_new_refresh_token_keeps_the_old_one_which_works_next_time() {
    let api = Upstream::start(api_ok()).await;
    let n = AtomicU32::new(0);
    // Tokens of 2 s (used for 1 s), and never a new refresh token.
    let token = Upstream::start(move |_| {
        let i = n.fetch_add(1, Ordering::SeqCst) + 1;
        Reply::Json(
            200,
            json!({"access_token": format!("at-canary-{i}"), "token_type": "Bearer", "expires_in": 2}),
        )
    })
    .await;
    let rig = connected(
        &format!("{}/token", token.url()),
        &api,
        Duration::from_secs(5),
    )
    .await;
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    let grant = rig.grant().await;
    assert_eq!(
        grant.refresh_token().map(Secret::expose),
        Some(FIRST_REFRESH)
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = rig.call("get_item", json!({"item_id": "i2"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(
        bodies(&token),
        [
            "grant_type=refresh_token&refresh_token=rt-canary-1",
            "grant_type=refresh_token&refresh_token=rt-canary-1"
        ]
    );
    let sent: Vec<String> = api
        .received()
        .iter()
        .map(|r| r.header("authorization").unwrap_or_default().to_owned())
        .collect();
    assert_eq!(sent, ["Bearer at-canary-1", "Bearer at-canary-2"]);
    let grant = rig.grant().await;
    assert_eq!(grant.version(), 3);
    assert_eq!(
        grant.refresh_token().map(Secret::expose),
        Some(FIRST_REFRESH)
    );
}

/// The fleet test's reuse detection: a call whose token an upstream refused marks the grant's
/// token expired (a store write that does not wait for the refresh hold) while another call's
/// refresh is out at the provider, which rotates the refresh token. The refresh's answer must
/// still be stored: dropped, the store would keep the refresh token just presented, and the
/// next refresh would present it a second time.
#[tokio::test]
async fn a_token_marked_expired_during_a_refresh_keeps_the_rotated_refresh_token() {
    let api = Upstream::start(api_ok()).await;
    let issue = rotating();
    let token = Upstream::start(move |_| Reply::Json(200, issue())).await;
    token.set_delay(Duration::from_millis(600));
    let rig = Arc::new(
        connected(
            &format!("{}/token", token.url()),
            &api,
            Duration::from_secs(5),
        )
        .await,
    );
    let call = {
        let rig = Arc::clone(&rig);
        tokio::spawn(async move { rig.call("get_item", json!({"item_id": "i1"})).await })
    };
    // While the refresh is out: what another call's 401 writes.
    while token.requests() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let marked = rig
        .store()
        .replace(&GrantKey::shared("api"), 1, GrantUpdate::Expired)
        .await
        .expect("mark");
    assert!(matches!(marked, sallyport_core::vault::Replaced::Stored(_)));
    let r = call.await.expect("call");
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    let grant = rig.grant().await;
    assert_eq!(grant.version(), 3, "{grant:?}");
    assert_eq!(
        grant.refresh_token().map(Secret::expose),
        Some("rt-canary-2"),
        "the rotated refresh token was kept"
    );
    assert_eq!(
        grant.access_token().map(Secret::expose),
        Some("at-canary-1")
    );
    // The next refresh presents the rotated one, never the one already used.
    token.set_delay(Duration::ZERO);
    rig.store()
        .replace(&GrantKey::shared("api"), 3, GrantUpdate::Expired)
        .await
        .expect("expire");
    let r = rig.call("get_item", json!({"item_id": "i2"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(
        bodies(&token),
        [
            "grant_type=refresh_token&refresh_token=rt-canary-1",
            "grant_type=refresh_token&refresh_token=rt-canary-2"
        ]
    );
}
