//! OAuth credentials against a real provider: `oidc-provider` run by node
//! (`sallyport_tests::oidc`), access tokens of 3 seconds, refresh tokens rotated with reuse
//! detection, and an API that checks every token with the provider's introspection
//! endpoint. Calls run through an `Executor` while tokens expire under them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sallyport_core::Status;
use sallyport_core::code::RefusalCode;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, GrantKey, GrantUpdate, MemoryVault, OAuthClient,
    Secret, Vault,
};
use sallyport_tests::oidc::{IntrospectingApi, MACHINE_CLIENT, OidcProvider, WEBAPP_CLIENT};
use serde_json::json;

use crate::oauth_rig::{OAuthRig, oauth_rig};

const TTL: u64 = 3;

fn rig(kind: CredentialKind, secret: &str, api: &IntrospectingApi) -> OAuthRig {
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new("api", kind, Binding::url(api.url())),
        Secret::new(secret),
    );
    let vault: Arc<dyn Vault> = vault;
    let rig = oauth_rig(vault, |b| b, Duration::ZERO);
    rig.add_canary(secret);
    rig
}

/// Calls `get_item` 8 at a time every 200 ms for `duration`; every result must be
/// completed. Returns how many calls were made.
async fn load(rig: &Arc<OAuthRig>, duration: Duration) -> usize {
    let started = Instant::now();
    let mut calls = 0;
    while started.elapsed() < duration {
        let batch: Vec<_> = (0..8)
            .map(|i| {
                let rig = Arc::clone(rig);
                tokio::spawn(async move {
                    rig.call("get_item", json!({"item_id": format!("i{i}")}))
                        .await
                })
            })
            .collect();
        for call in batch {
            let r = call.await.expect("join");
            assert_eq!(r.status, Status::Completed, "{}", r.to_json());
            calls += 1;
        }
        rig.learn_tokens().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_credentials_through_the_executor_refresh_as_tokens_expire_without_an_auth_failure()
{
    let provider = OidcProvider::start(TTL).await;
    let api = IntrospectingApi::start(&provider).await;
    let kind = CredentialKind::OAuthClientCredentials(
        OAuthClient::new(MACHINE_CLIENT.0, provider.token_endpoint()).with_scopes(["api:read"]),
    );
    let rig = Arc::new(rig(kind, MACHINE_CLIENT.1, &api));
    let elapsed = Duration::from_secs(10);
    let calls = load(&rig, elapsed).await;
    let issued = provider.tokens_issued("client_credentials");
    eprintln!(
        "client credentials: {calls} calls in {elapsed:?}, {issued} tokens of {TTL} s, {} requests at the API, {} refused",
        api.requests(),
        api.unauthorized()
    );
    assert_eq!(api.accepted(), calls as u64 + api.unauthorized());
    assert_eq!(api.without_token(), 0);
    // Refreshed ahead of expiry (a third of 3 s before it): about one token per 2 s of
    // load, never one per call.
    assert!(
        (3..=10).contains(&issued),
        "{issued} tokens for {calls} calls"
    );
    // The API said who called: the client itself.
    let r = rig.call("get_item", json!({"item_id": "who"})).await;
    assert_eq!(
        r.data.as_ref().map(|d| d["id"].clone()),
        Some(json!("machine"))
    );
}

/// A grant for `login` through the authorization code flow, stored in the rig's vault.
async fn connect(rig: &OAuthRig, provider: &OidcProvider, login: &str) {
    let grant = provider
        .authorize(login, "openid offline_access api:read")
        .await;
    rig.add_canary(&grant.refresh_token);
    rig.add_canary(&grant.access_token);
    rig.store()
        .replace(
            &GrantKey::shared("api"),
            0,
            GrantUpdate::Connected {
                refresh_token: Secret::new(grant.refresh_token),
            },
        )
        .await
        .expect("store the grant");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rotating_refresh_token_is_never_presented_twice_by_one_process() {
    let provider = OidcProvider::start(TTL).await;
    let api = IntrospectingApi::start(&provider).await;
    let kind = CredentialKind::OAuthRefresh(
        OAuthClient::new(WEBAPP_CLIENT.0, provider.token_endpoint()).with_scopes(["api:read"]),
    );
    let rig = Arc::new(rig(kind, WEBAPP_CLIENT.1, &api));
    connect(&rig, &provider, "bob").await;
    let elapsed = Duration::from_secs(10);
    let calls = load(&rig, elapsed).await;
    let refreshes = provider.tokens_issued("refresh_token");
    eprintln!(
        "refresh grant: {calls} calls in {elapsed:?}, {refreshes} refreshes of {TTL} s tokens, {} reuse detections",
        provider.reuse_detections()
    );
    assert_eq!(provider.reuse_detections(), 0);
    assert_eq!(provider.count("grant_error"), 0);
    assert!((3..=10).contains(&refreshes), "{refreshes} refreshes");
    assert_eq!(api.without_token(), 0);
    // Every refresh rotated the refresh token, and the vault holds the current one.
    let grant = rig.grant().await;
    assert!(grant.version() > refreshes as u64, "{grant:?}");
    let r = rig.call("get_item", json!({"item_id": "who"})).await;
    assert_eq!(r.data.as_ref().map(|d| d["id"].clone()), Some(json!("bob")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grant_revoked_at_the_provider_turns_calls_into_credential_unavailable_within_one_token_lifetime()
 {
    let provider = OidcProvider::start(TTL).await;
    let api = IntrospectingApi::start(&provider).await;
    let kind =
        CredentialKind::OAuthRefresh(OAuthClient::new(WEBAPP_CLIENT.0, provider.token_endpoint()));
    let rig = Arc::new(rig(kind, WEBAPP_CLIENT.1, &api));
    connect(&rig, &provider, "carol").await;
    load(&rig, Duration::from_secs(2)).await;
    let refresh = rig
        .grant()
        .await
        .refresh_token()
        .map(|t| t.expose().to_owned())
        .expect("refresh token");
    provider.revoke(&refresh, WEBAPP_CLIENT).await;
    let revoked = Instant::now();
    let mut turned = None;
    let mut statuses = Vec::new();
    while revoked.elapsed() < Duration::from_secs(TTL + 2) {
        let r = rig.call("send_item", json!({"item_id": "i1"})).await;
        statuses.push(r.status);
        if r.code.as_ref().map(|c| c.as_str()) == Some(RefusalCode::CredentialUnavailable.as_str())
        {
            assert!(
                r.reason
                    .as_deref()
                    .unwrap_or_default()
                    .contains("needs reconnecting"),
                "{}",
                r.to_json()
            );
            turned = Some(revoked.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let turned = turned.unwrap_or_else(|| panic!("still usable after revocation: {statuses:?}"));
    eprintln!("revoked grant refused after {turned:?}");
    assert!(turned <= Duration::from_secs(TTL + 1), "{turned:?}");
    // From then on the provider is not asked again, and nothing is sent.
    let before = api.requests();
    let errors = provider.count("grant_error");
    for _ in 0..3 {
        let r = rig.call("get_item", json!({"item_id": "i1"})).await;
        assert_eq!(
            r.code.as_ref().map(|c| c.as_str()),
            Some(RefusalCode::CredentialUnavailable.as_str()),
            "{}",
            r.to_json()
        );
    }
    assert_eq!(api.requests(), before);
    assert_eq!(provider.count("grant_error"), errors);
    assert_eq!(provider.reuse_detections(), 0);
    assert!(rig.grant().await.reconnect_reason().is_some());
}
