//! A token endpoint that counts lifetimes on whole seconds, as `oidc-provider` does (and any
//! provider whose tokens carry a JWT `exp`): a token issued at x.9 s with `expires_in: 2`
//! is refused from x+2.0 s on, 1.1 s after it was issued. The API on 127.0.0.1:0 refuses a
//! token whose second has come exactly as that provider's introspection does
//! (`exp <= floor(now)`).
//!
//! The fleet test on the real provider saw a few requests a run answered `401` and sent
//! again: the channel took such a token to live the full 2 s and used it until a third of
//! that (0.67 s) was left, 0.2 s past the moment the provider refused it. It now takes a
//! token to expire [`EXPIRY_ROUNDING`] earlier than `expires_in` says.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sallyport_core::Status;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, MemoryVault, OAuthClient, Secret, Vault,
};
use sallyport_http::oauth::EXPIRY_ROUNDING;
use sallyport_tests::http_server::{Reply, Upstream};
use serde_json::json;

use crate::oauth_rig::oauth_rig;

const TTL_S: u64 = 2;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Sleeps until the wall clock reads `ms` since the Unix epoch.
async fn sleep_until_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms.saturating_sub(now_ms()))).await;
}

#[tokio::test]
async fn a_token_whose_whole_second_expiry_came_is_refreshed_before_it_is_sent() {
    assert_eq!(EXPIRY_ROUNDING, Duration::from_secs(1));
    // token → (issued at, ms; expires at, whole seconds), as the provider keeps them.
    let issued: Arc<Mutex<HashMap<String, (u64, u64)>>> = Arc::default();
    let n = AtomicU32::new(0);
    let book = Arc::clone(&issued);
    let token = Upstream::start(move |_| {
        let i = n.fetch_add(1, Ordering::SeqCst) + 1;
        let at = now_ms();
        let name = format!("at-canary-{i}");
        book.lock()
            .expect("tokens")
            .insert(name.clone(), (at, at / 1000 + TTL_S));
        Reply::Json(
            200,
            json!({"access_token": name, "token_type": "Bearer", "expires_in": TTL_S}),
        )
    })
    .await;
    let refused = Arc::new(AtomicU32::new(0));
    let (book, refusals) = (Arc::clone(&issued), Arc::clone(&refused));
    let api = Upstream::start(move |r| {
        let bearer = r
            .header("authorization")
            .and_then(|a| a.strip_prefix("Bearer "))
            .unwrap_or_default();
        let exp = book.lock().expect("tokens").get(bearer).map(|t| t.1);
        match exp {
            Some(exp) if exp > now_ms() / 1000 => {
                Reply::Json(200, json!({"id": "i1", "state": "ok"}))
            }
            _ => {
                refusals.fetch_add(1, Ordering::SeqCst);
                Reply::Json(401, json!({"error": "invalid_token"}))
            }
        }
    })
    .await;
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "api",
            CredentialKind::OAuthClientCredentials(OAuthClient::new(
                "client-1",
                format!("{}/token", token.url()),
            )),
            Binding::url(api.url()),
        ),
        Secret::new("client-secret-canary-0e7a"),
    );
    let vault: Arc<dyn Vault> = vault;
    let rig = oauth_rig(vault, |b| b, Duration::ZERO);
    for round in 0..3 {
        // Asked for a token at x.88 s: the provider's expiry is x+2.0, 1.12 s later.
        sleep_until_ms((now_ms() / 1000 + 1) * 1000 + 880).await;
        let r = rig.call("get_item", json!({"item_id": "i1"})).await;
        assert_eq!(r.status, Status::Completed, "{}", r.to_json());
        let (at, exp) = issued
            .lock()
            .expect("tokens")
            .values()
            .copied()
            .max()
            .expect("a token was issued");
        // 50 ms into the second the token died in: 1.17 s after it was issued, before the
        // 1.33 s the channel used to wait.
        sleep_until_ms(exp * 1000 + 50).await;
        let before = token.requests();
        let r = rig.call("get_item", json!({"item_id": "i2"})).await;
        assert_eq!(r.status, Status::Completed, "{}", r.to_json());
        assert_eq!(
            refused.load(Ordering::SeqCst),
            0,
            "round {round}: a token issued at {at} ms, dead at {exp} s, was sent at {} ms",
            now_ms()
        );
        assert_eq!(token.requests(), before + 1, "refreshed before it was sent");
    }
    assert_eq!(api.requests(), 6, "each call sent once");
}

/// A refresh that took most of a short token's life (a provider or a store slow under
/// load): the token is still valid, so the call that asked for it is sent with it, not
/// refused. (The fleet test saw such calls refused as "a token that expires at once".)
#[tokio::test]
async fn a_token_whose_refresh_took_most_of_its_life_is_used_by_the_call_that_asked() {
    let n = AtomicU32::new(0);
    let token = Upstream::start(move |_| {
        let i = n.fetch_add(1, Ordering::SeqCst) + 1;
        Reply::Json(
            200,
            json!({"access_token": format!("at-canary-{i}"), "token_type": "Bearer", "expires_in": 2}),
        )
    })
    .await;
    // Used for 1 s, refreshed with 0.33 s left: the answer comes when 0.2 s are left.
    token.set_delay(Duration::from_millis(800));
    let api = Upstream::start(|_| Reply::Json(200, json!({"id": "i1", "state": "ok"}))).await;
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "api",
            CredentialKind::OAuthClientCredentials(OAuthClient::new(
                "client-1",
                format!("{}/token", token.url()),
            )),
            Binding::url(api.url()),
        ),
        Secret::new("client-secret-canary-0e7a"),
    );
    let vault: Arc<dyn Vault> = vault;
    let rig = oauth_rig(vault, |b| b, Duration::ZERO);
    let r = rig.call("get_item", json!({"item_id": "i1"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(token.requests(), 1);
    assert_eq!(
        api.received()[0].header("authorization"),
        Some("Bearer at-canary-1")
    );
}
