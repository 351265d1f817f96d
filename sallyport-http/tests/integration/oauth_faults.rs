//! OAuth credentials against a fake token endpoint on 127.0.0.1:0, for what the real
//! provider cannot be made to do: down, slow, garbage, HTML, no `expires_in`, a refresh
//! without a new refresh token, a refused grant, and the upstream's `401`. Each checks what
//! the agent saw, what the API received (nothing without a valid token) and what the vault
//! kept.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use sallyport_core::Status;
use sallyport_core::code::{RefusalCode, UpstreamCode};
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, GrantKey, GrantUpdate, MemoryVault, OAuthClient,
    Secret, Vault,
};
use sallyport_http::oauth::DEFAULT_LIFETIME;
use sallyport_tests::http_server::{Received, Reply, Upstream, audit_event, journal_dispatches};
use serde_json::json;

use crate::oauth_rig::{OAuthRig, oauth_rig};

const CLIENT_SECRET: &str = "client-secret-canary-4b1d";

fn item() -> Reply {
    Reply::Json(200, json!({"id": "i1", "state": "ok"}))
}

/// An API that records the bearer token of every request and answers `reply`.
async fn api(reply: impl Fn(&Received) -> Reply + Send + Sync + 'static) -> Upstream {
    Upstream::start(reply).await
}

fn bearer_of(r: &Received) -> String {
    r.header("authorization").unwrap_or_default().to_owned()
}

/// A token endpoint answering `at-1`, `at-2`, … with `expires_in`.
fn issuing(expires_in: u64) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let n = AtomicU32::new(0);
    move |_| {
        let i = n.fetch_add(1, Ordering::SeqCst) + 1;
        Reply::Json(
            200,
            json!({"access_token": format!("at-canary-{i}"), "token_type": "Bearer", "expires_in": expires_in}),
        )
    }
}

fn vault_with(kind: CredentialKind, api_url: &str) -> Arc<MemoryVault> {
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new("api", kind, Binding::url(api_url)),
        Secret::new(CLIENT_SECRET),
    );
    vault
}

fn client_credentials(token: &Upstream) -> CredentialKind {
    CredentialKind::OAuthClientCredentials(
        OAuthClient::new("client-1", format!("{}/token", token.url())).with_scopes(["api:read"]),
    )
}

async fn rig_for(kind: CredentialKind, api: &Upstream) -> OAuthRig {
    rig_with(kind, api, |b| b).await
}

async fn rig_with(
    kind: CredentialKind,
    api: &Upstream,
    configure: impl FnOnce(sallyport_http::HttpChannelBuilder) -> sallyport_http::HttpChannelBuilder,
) -> OAuthRig {
    let vault: Arc<dyn Vault> = vault_with(kind, &api.url());
    let rig = oauth_rig(vault, configure, Duration::ZERO);
    rig.add_canary(CLIENT_SECRET);
    for i in 1..=5 {
        rig.add_canary(&format!("at-canary-{i}"));
    }
    rig
}

fn assert_unavailable(r: &sallyport_core::outcome::ActionResult, words: &str) {
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
}

#[tokio::test]
async fn a_token_endpoint_that_is_down_refuses_the_call_and_sends_nothing() {
    let api = api(|_| item()).await;
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let kind = CredentialKind::OAuthClientCredentials(OAuthClient::new(
        "client-1",
        format!("http://127.0.0.1:{port}/token"),
    ));
    let rig = rig_for(kind, &api).await;
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_unavailable(&r, "the token endpoint could not be reached");
    assert_eq!(api.requests(), 0);
    let grant = rig.grant().await;
    assert_eq!(grant.version(), 0, "nothing stored");
    assert_eq!(
        grant.reconnect_reason(),
        None,
        "a transient failure needs no reconnection"
    );
}

#[tokio::test]
async fn a_token_endpoint_slower_than_the_timeout_refuses_the_call_and_sends_nothing() {
    let token = Upstream::start(issuing(60)).await;
    token.set_delay(Duration::from_secs(3));
    let api = api(|_| item()).await;
    let rig = rig_with(client_credentials(&token), &api, |b| {
        b.token_timeout(Duration::from_millis(300))
    })
    .await;
    let started = std::time::Instant::now();
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_unavailable(&r, "did not answer within 300 ms");
    assert_eq!(api.requests(), 0);
    assert_eq!(rig.grant().await.version(), 0);
}

#[tokio::test]
async fn garbage_and_html_from_the_token_endpoint_refuse_the_call_and_send_nothing() {
    for (content_type, body) in [
        ("application/json", "{\"access_tok"),
        ("text/html", "<html><body>Sign in to continue</body></html>"),
        ("application/json", "{\"token_type\": \"Bearer\"}"),
    ] {
        let token = Upstream::start(move |_| {
            Reply::Raw(
                200,
                vec![("content-type".into(), content_type.into())],
                bytes::Bytes::from_static(body.as_bytes()),
            )
        })
        .await;
        let api = api(|_| item()).await;
        let rig = rig_for(client_credentials(&token), &api).await;
        let r = rig.call("get_item", json!({"item_id": "i1"})).await;
        assert_unavailable(&r, "is not an OAuth token response");
        assert_eq!(api.requests(), 0, "{body}");
        assert_eq!(token.requests(), 1);
        assert_eq!(rig.grant().await.version(), 0);
    }
}

#[tokio::test]
async fn a_token_of_another_type_is_refused_and_nothing_is_sent() {
    let token = Upstream::start(|_| {
        Reply::Json(
            200,
            json!({"access_token": "at-canary-1", "token_type": "DPoP", "expires_in": 60}),
        )
    })
    .await;
    let api = api(|_| item()).await;
    let rig = rig_for(client_credentials(&token), &api).await;
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_unavailable(&r, "not a bearer token");
    assert_eq!(api.requests(), 0);
}

#[tokio::test]
async fn a_token_without_expires_in_lives_the_documented_default() {
    let token = Upstream::start(|_| {
        Reply::Json(
            200,
            json!({"access_token": "at-canary-1", "token_type": "bearer"}),
        )
    })
    .await;
    let api = api(|_| item()).await;
    let rig = rig_for(client_credentials(&token), &api).await;
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    let grant = rig.grant().await;
    assert_eq!(grant.lifetime(), DEFAULT_LIFETIME);
    assert_eq!(DEFAULT_LIFETIME, Duration::from_secs(300));
    assert_eq!(bearer_of(&api.received()[0]), "Bearer at-canary-1");
    // The client authenticated with HTTP basic and asked for its scopes.
    let sent = &token.received()[0];
    let body = String::from_utf8_lossy(&sent.body).into_owned();
    assert_eq!(body, "grant_type=client_credentials&scope=api%3Aread");
    assert!(
        sent.header("authorization")
            .is_some_and(|a| a.starts_with("Basic "))
    );
}

#[tokio::test]
async fn a_cached_token_is_reused_until_the_margin_and_then_refreshed_ahead_of_expiry() {
    let token = Upstream::start(issuing(2)).await;
    let api = api(|_| item()).await;
    let rig = rig_for(client_credentials(&token), &api).await;
    for _ in 0..3 {
        let r = rig.call("get_item", json!({"item_id": "i1"})).await;
        assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    }
    assert_eq!(token.requests(), 1, "one token for three calls");
    // A 2 s token is taken to live 1 s (a second short of `expires_in`, for the provider's
    // whole-second clock) and refreshed once less than a third of that (0.33 s) is left.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(token.requests(), 2);
    let tokens: Vec<String> = api.received().iter().map(bearer_of).collect();
    assert_eq!(
        tokens,
        [
            "Bearer at-canary-1",
            "Bearer at-canary-1",
            "Bearer at-canary-1",
            "Bearer at-canary-2"
        ]
    );
}

#[tokio::test]
async fn concurrent_calls_with_an_expired_token_refresh_it_once() {
    let token = Upstream::start(issuing(60)).await;
    token.set_delay(Duration::from_millis(100));
    let api = api(|_| item()).await;
    let rig = Arc::new(rig_for(client_credentials(&token), &api).await);
    let calls: Vec<_> = (0..16)
        .map(|i| {
            let rig = Arc::clone(&rig);
            tokio::spawn(async move {
                rig.call("get_item", json!({"item_id": format!("i{i}")}))
                    .await
            })
        })
        .collect();
    for call in calls {
        let r = call.await.expect("join");
        assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    }
    assert_eq!(token.requests(), 1);
    assert_eq!(api.requests(), 16);
}

#[tokio::test]
async fn a_refresh_without_a_new_refresh_token_keeps_the_old_one() {
    let token = Upstream::start(issuing(60)).await;
    let api = api(|_| item()).await;
    let kind = CredentialKind::OAuthRefresh(OAuthClient::new(
        "client-1",
        format!("{}/token", token.url()),
    ));
    let rig = rig_for(kind, &api).await;
    rig.add_canary("rt-canary-1");
    let store = rig.store();
    store
        .replace(
            &GrantKey::shared("api"),
            0,
            GrantUpdate::Connected {
                refresh_token: Secret::new("rt-canary-1"),
            },
        )
        .await
        .expect("connect");
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    let grant = rig.grant().await;
    assert_eq!(
        grant.refresh_token().map(Secret::expose),
        Some("rt-canary-1")
    );
    assert_eq!(
        grant.access_token().map(Secret::expose),
        Some("at-canary-1")
    );
    let body = String::from_utf8_lossy(&token.received()[0].body).into_owned();
    assert_eq!(body, "grant_type=refresh_token&refresh_token=rt-canary-1");
}

#[tokio::test]
async fn a_refused_grant_marks_the_credential_for_reconnection_and_asks_the_provider_no_more() {
    let token = Upstream::start(|_| {
        Reply::Json(
            400,
            json!({"error": "invalid_grant", "error_description": "grant revoked"}),
        )
    })
    .await;
    let api = api(|_| item()).await;
    let kind = CredentialKind::OAuthRefresh(OAuthClient::new(
        "client-1",
        format!("{}/token", token.url()),
    ));
    let rig = rig_for(kind, &api).await;
    rig.add_canary("rt-canary-1");
    rig.store()
        .replace(
            &GrantKey::shared("api"),
            0,
            GrantUpdate::Connected {
                refresh_token: Secret::new("rt-canary-1"),
            },
        )
        .await
        .expect("connect");
    for _ in 0..2 {
        let r = rig.call("create_item", json!({"item_id": "i1"})).await;
        assert_unavailable(&r, "needs reconnecting");
        assert!(
            r.reason
                .as_deref()
                .unwrap_or_default()
                .contains("invalid_grant"),
            "{}",
            r.to_json()
        );
        assert_eq!(journal_dispatches(&rig.journal, r.attempt_id.as_str()), 0);
    }
    assert_eq!(
        token.requests(),
        1,
        "the refused grant is not presented again"
    );
    assert_eq!(api.requests(), 0);
    let grant = rig.grant().await;
    assert!(grant.reconnect_reason().is_some());
    // Nothing lost: the refresh token stays for the human to see what was refused.
    assert_eq!(
        grant.refresh_token().map(Secret::expose),
        Some("rt-canary-1")
    );
}

#[tokio::test]
async fn a_401_on_an_observe_call_refreshes_once_and_sends_it_again() {
    let token = Upstream::start(issuing(60)).await;
    let api = api(|r| {
        if r.n == 1 {
            Reply::Json(401, json!({"error": "invalid_token"}))
        } else {
            item()
        }
    })
    .await;
    let rig = rig_for(client_credentials(&token), &api).await;
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    let tokens: Vec<String> = api.received().iter().map(bearer_of).collect();
    assert_eq!(tokens, ["Bearer at-canary-1", "Bearer at-canary-2"]);
    assert_eq!(token.requests(), 2);
    assert_eq!(
        audit_event(&rig.journal, r.attempt_id.as_str())["dispatches"],
        2
    );
}

#[tokio::test]
async fn a_401_on_an_idempotency_key_call_resends_the_same_key_with_a_fresh_token() {
    let token = Upstream::start(issuing(60)).await;
    let api = api(|r| {
        if r.n == 1 {
            Reply::Json(401, json!({"error": "invalid_token"}))
        } else {
            Reply::Json(201, json!({"id": "i1", "state": "created"}))
        }
    })
    .await;
    let rig = rig_for(client_credentials(&token), &api).await;
    let r = rig.call("create_item", json!({"item_id": "i1"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    let received = api.received();
    assert_eq!(received.len(), 2);
    let key = |r: &Received| r.header("idempotency-key").unwrap_or_default().to_owned();
    assert!(!key(&received[0]).is_empty());
    assert_eq!(key(&received[0]), key(&received[1]));
    assert_ne!(bearer_of(&received[0]), bearer_of(&received[1]));
    assert_eq!(journal_dispatches(&rig.journal, r.attempt_id.as_str()), 2);
}

#[tokio::test]
async fn a_401_on_a_commitment_is_not_resent_and_the_next_call_gets_a_fresh_token() {
    let token = Upstream::start(issuing(60)).await;
    let api = api(|r| {
        if r.n == 1 {
            Reply::Json(401, json!({"error": "invalid_token"}))
        } else {
            item()
        }
    })
    .await;
    let rig = rig_for(client_credentials(&token), &api).await;
    let r = rig.call("send_item", json!({"item_id": "i1"})).await;
    assert_eq!(r.status, Status::Rejected, "{}", r.to_json());
    assert_eq!(
        r.code.as_ref().map(|c| c.as_str()),
        Some(UpstreamCode::AuthFailed.as_str())
    );
    assert_eq!(api.requests(), 1, "a commitment is not resent");
    assert_eq!(journal_dispatches(&rig.journal, r.attempt_id.as_str()), 1);
    // Not marked unusable: the next call refreshes and goes through.
    let r = rig.call("send_item", json!({"item_id": "i2"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    let tokens: Vec<String> = api.received().iter().map(bearer_of).collect();
    assert_eq!(tokens, ["Bearer at-canary-1", "Bearer at-canary-2"]);
}

#[tokio::test]
async fn a_call_approved_after_its_token_expired_gets_a_fresh_one_at_send_time() {
    let token = Upstream::start(issuing(60)).await;
    let api = api(|_| item()).await;
    let vault: Arc<dyn Vault> = vault_with(client_credentials(&token), &api.url());
    // The grant holds a token valid for 1.5 s when the call starts; consent takes 2 s.
    let now = SystemTime::now();
    vault
        .grants()
        .expect("grants")
        .replace(
            &GrantKey::shared("api"),
            0,
            GrantUpdate::Issued {
                access_token: Secret::new("at-canary-parked"),
                issued_at: now,
                expires_at: now + Duration::from_millis(1500),
                refresh_token: None,
            },
        )
        .await
        .expect("seed");
    let rig = oauth_rig(vault, |b| b, Duration::from_secs(2));
    rig.add_canary("at-canary-parked");
    rig.add_canary("at-canary-1");
    let r = rig.call("send_item", json!({"item_id": "i1"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(bearer_of(&api.received()[0]), "Bearer at-canary-1");
}

#[tokio::test]
async fn an_upstream_echo_of_a_refreshed_token_is_scrubbed() {
    let token = Upstream::start(issuing(60)).await;
    let api = api(|r| {
        let echoed = r.header("authorization").unwrap_or_default().to_owned();
        Reply::Json(
            400,
            json!({"id": "i1", "state": "bad", "message": echoed, "error": echoed}),
        )
    })
    .await;
    let rig = rig_for(client_credentials(&token), &api).await;
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    // `call` asserted no token in the result or the journal.
    assert_eq!(r.status, Status::Rejected, "{}", r.to_json());
    assert_eq!(api.requests(), 1);
}
