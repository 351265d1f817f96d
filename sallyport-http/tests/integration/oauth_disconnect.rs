//! Disconnecting an account against the real provider (`oidc-provider`, revocation enabled):
//! `HttpChannel::disconnect` revokes the subject's grant (RFC 7009) and removes it; the old
//! refresh token is then refused by the provider itself, and the subject's next call is
//! refused with `credential_unavailable` and a connect hint for the host. A provider that is
//! down keeps the grant (unless forced, which says it was not revoked); a credential without a
//! revocation endpoint is removed here only, and says so; one that refuses the client or never
//! answers keeps the grant. No token appears in any result, error or sentence.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use sallyport_core::journal::MemoryJournal;
use sallyport_core::outcome::ConnectNeeded;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, GrantKey, GrantStore, GrantUpdate, MemoryVault,
    OAuthClient, Secret, Vault,
};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_http::oauth::{Disconnect, DisconnectError, Revocation};
use sallyport_tests::oidc::{IntrospectingApi, OidcProvider, WEBAPP_CLIENT, form};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Read one item as the session's subject.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_item", effect = observe, credential = "github")]
#[http(get = "/v1/items/{item_id}", result = Item)]
struct GetItem {
    item_id: String,
}

/// Who the provider says the token belongs to.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Item {
    id: String,
}

const SCOPE: &str = "openid offline_access api:read";

fn revocation_endpoint(provider: &OidcProvider) -> String {
    format!("{}/token/revocation", provider.issuer())
}

/// A vault holding `github`, per subject, bound to `api_url`.
fn vault(provider: &OidcProvider, api_url: &str, revocation: Option<String>) -> Arc<MemoryVault> {
    let mut client = OAuthClient::new(WEBAPP_CLIENT.0, provider.token_endpoint())
        .with_scopes(["api:read"])
        .per_subject();
    if let Some(endpoint) = revocation {
        client = client.with_revocation_endpoint(endpoint);
    }
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "github",
            CredentialKind::OAuthRefresh(client),
            Binding::url(api_url),
        ),
        Secret::new(WEBAPP_CLIENT.1),
    );
    vault
}

/// Connects `user`'s account: an authorization-code grant from the provider, stored.
async fn connect(provider: &OidcProvider, store: &dyn GrantStore, user: &str) -> String {
    let grant = provider.authorize(user, SCOPE).await;
    store
        .put(
            &GrantKey::for_subject("github", user),
            GrantUpdate::Connected {
                refresh_token: Secret::new(grant.refresh_token.clone()),
            },
        )
        .await
        .expect("connect");
    grant.refresh_token
}

fn executor(vault: Arc<MemoryVault>, channel: HttpChannel) -> Executor {
    let vault: Arc<dyn Vault> = vault;
    Executor::builder(
        Catalog::builder()
            .action::<GetItem>()
            .build()
            .expect("catalog"),
    )
    .journal(MemoryJournal::new())
    .vault_arc(vault)
    .channel(channel)
    .build()
    .expect("executor")
}

/// Presents `refresh_token` to the provider's token endpoint directly: its HTTP status and
/// OAuth error.
async fn present(provider: &OidcProvider, refresh_token: &str) -> (u16, String) {
    let http = HttpChannel::builder()
        .build()
        .expect("channel")
        .client(Duration::from_secs(5))
        .expect("client");
    let answer = http
        .post(provider.token_endpoint())
        .basic_auth(WEBAPP_CLIENT.0, Some(WEBAPP_CLIENT.1))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
        ]))
        .send()
        .await
        .expect("token request");
    let status = answer.status().as_u16();
    let body: serde_json::Value =
        serde_json::from_slice(&answer.bytes().await.expect("body")).expect("JSON");
    (
        status,
        body["error"].as_str().unwrap_or_default().to_owned(),
    )
}

/// `text` holds none of `secrets`, plain or base64.
fn assert_no_secret(text: &str, secrets: &[&str]) {
    for secret in secrets {
        let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
        assert!(
            !text.contains(secret) && !text.contains(&b64),
            "a secret leaked in: {text}"
        );
    }
}

async fn subjects(store: &dyn GrantStore) -> Vec<String> {
    store
        .list(Some("github"))
        .await
        .expect("list")
        .into_iter()
        .filter_map(|g| g.subject)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_revokes_the_grant_at_the_provider_removes_it_and_the_subject_must_connect_again()
 {
    let provider = OidcProvider::start(60).await;
    let api = IntrospectingApi::start(&provider).await;
    let vault = vault(&provider, api.url(), Some(revocation_endpoint(&provider)));
    let store = vault.grants().expect("grants");
    connect(&provider, store.as_ref(), "alice").await;
    connect(&provider, store.as_ref(), "bob").await;
    let channel = HttpChannel::builder().build().expect("channel");
    let executor = executor(Arc::clone(&vault), channel.clone());
    let alice = Session::new("chat-alice").for_subject("alice");
    let bob = Session::new("chat-bob").for_subject("bob");
    // Alice's call refreshes her grant: it now holds an access token and a rotated refresh
    // token, both of which the disconnect must revoke.
    let result = executor
        .call("get_item", json!({"item_id": "a1"}), &alice)
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.summary());
    assert_eq!(result.data.as_ref().expect("data")["id"], "alice");
    let held = store
        .current(&GrantKey::for_subject("github", "alice"))
        .await
        .expect("alice's grant");
    let refresh_token = held
        .refresh_token()
        .expect("refresh token")
        .expose()
        .to_owned();
    let access_token = held
        .access_token()
        .expect("access token")
        .expose()
        .to_owned();
    assert_eq!(provider.introspect(&access_token).await["active"], true);
    assert_eq!(provider.count("revoked"), 0);

    let done = channel
        .disconnect(vault.as_ref(), Disconnect::subject("github", "alice"))
        .await
        .expect("disconnected");
    assert_eq!(done.key, GrantKey::for_subject("github", "alice"));
    assert_eq!(done.revocation, Revocation::Revoked { tokens: 2 });
    assert_eq!(
        done.to_string(),
        "disconnected the `github` account of subject `alice`: revoked at the provider and removed from the vault"
    );
    let secrets = [
        refresh_token.as_str(),
        access_token.as_str(),
        WEBAPP_CLIENT.1,
    ];
    assert_no_secret(&format!("{done} {done:?}"), &secrets);

    // The provider revoked the grant (its own event), and refuses the old tokens.
    assert_eq!(provider.count("revoked"), 1, "{:?}", provider.events());
    assert_eq!(
        present(&provider, &refresh_token).await,
        (400, "invalid_grant".to_owned())
    );
    assert_eq!(provider.introspect(&access_token).await["active"], false);
    // Gone from the store; bob's grant stays.
    assert_eq!(subjects(store.as_ref()).await, ["bob"]);

    // Alice's next call is refused before anything is sent, with the host told to connect.
    let requests = api.requests();
    let result = executor
        .call("get_item", json!({"item_id": "a2"}), &alice)
        .await;
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(result.code_str(), Some("credential_unavailable"));
    assert!(
        result
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("the user has not connected their `github` account; nothing was sent"),
        "{}",
        result.summary()
    );
    assert_eq!(
        result.connect_needed(),
        Some(&ConnectNeeded::new("github", Some("alice".into()), false))
    );
    assert_eq!(
        api.requests(),
        requests,
        "alice's refused call reached the API"
    );
    assert_no_secret(&result.to_json(), &secrets);
    // Bob is not touched.
    let result = executor
        .call("get_item", json!({"item_id": "b1"}), &bob)
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.summary());
    assert_eq!(result.data.as_ref().expect("data")["id"], "bob");

    // A second disconnect finds nothing, and says so.
    let again = channel
        .disconnect(vault.as_ref(), Disconnect::subject("github", "alice"))
        .await
        .expect_err("nothing left");
    assert!(
        matches!(again, DisconnectError::NotConnected { .. }),
        "{again:?}"
    );
    assert_eq!(
        again.to_string(),
        "the `github` account of subject `alice` is not connected; nothing to disconnect"
    );
    assert_eq!(provider.count("revoked"), 1);
    assert_eq!(provider.reuse_detections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_is_down_keeps_the_grant_and_a_forced_disconnect_removes_it_and_says_it_was_not_revoked()
 {
    let provider = OidcProvider::start(60).await;
    let vault = vault(
        &provider,
        "http://127.0.0.1:9",
        Some(revocation_endpoint(&provider)),
    );
    let store = vault.grants().expect("grants");
    let refresh_token = connect(&provider, store.as_ref(), "carol").await;
    // The provider goes down.
    drop(provider);
    let channel = HttpChannel::builder()
        .token_timeout(Duration::from_secs(2))
        .build()
        .expect("channel");
    let kept = channel
        .disconnect(vault.as_ref(), Disconnect::subject("github", "carol"))
        .await
        .expect_err("the provider is down");
    assert!(
        matches!(kept, DisconnectError::NotRevoked { .. }),
        "{kept:?}"
    );
    assert_eq!(
        kept.to_string(),
        "the `github` account of subject `carol` was not revoked at the provider (the revocation endpoint could not be reached); the grant was NOT removed; disconnect again later, or force its removal"
    );
    assert_no_secret(
        &format!("{kept} {kept:?}"),
        &[refresh_token.as_str(), WEBAPP_CLIENT.1],
    );
    // Not removed: still listed, with the same refresh token.
    assert_eq!(subjects(store.as_ref()).await, ["carol"]);
    let grant = store
        .current(&GrantKey::for_subject("github", "carol"))
        .await
        .expect("kept");
    assert_eq!(
        grant.refresh_token().map(Secret::expose),
        Some(refresh_token.as_str())
    );

    // Forced: removed here, and the result says it was not revoked.
    let forced = channel
        .disconnect(
            vault.as_ref(),
            Disconnect::subject("github", "carol").force(),
        )
        .await
        .expect("forced");
    assert_eq!(
        forced.revocation,
        Revocation::Failed {
            reason: "the revocation endpoint could not be reached".into()
        }
    );
    assert!(
        forced.to_string().contains(
            "removed from the vault because the removal was forced, but NOT revoked at the provider"
        ),
        "{forced}"
    );
    assert_no_secret(
        &format!("{forced} {forced:?}"),
        &[refresh_token.as_str(), WEBAPP_CLIENT.1],
    );
    assert!(subjects(store.as_ref()).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_revocation_endpoint_the_grant_is_removed_here_only_and_the_result_says_so() {
    let provider = OidcProvider::start(60).await;
    let vault = vault(&provider, "http://127.0.0.1:9", None);
    let store = vault.grants().expect("grants");
    let refresh_token = connect(&provider, store.as_ref(), "dan").await;
    let channel = HttpChannel::builder().build().expect("channel");
    let done = channel
        .disconnect(vault.as_ref(), Disconnect::subject("github", "dan"))
        .await
        .expect("removed");
    assert_eq!(done.revocation, Revocation::NotConfigured);
    assert_eq!(
        done.to_string(),
        "disconnected the `github` account of subject `dan`: removed from the vault; not revoked at the provider: no revocation endpoint configured"
    );
    assert!(subjects(store.as_ref()).await.is_empty());
    // Nothing asked the provider: the grant is still valid there, as the sentence says.
    assert_eq!(provider.count("revoked"), 0);
    assert_eq!(present(&provider, &refresh_token).await.0, 200);
}

#[tokio::test]
async fn a_credential_held_otherwise_is_refused_and_nothing_changes() {
    let provider = OidcProvider::start(60).await;
    let vault = vault(
        &provider,
        "http://127.0.0.1:9",
        Some(revocation_endpoint(&provider)),
    );
    let store = vault.grants().expect("grants");
    connect(&provider, store.as_ref(), "erin").await;
    let channel = HttpChannel::builder().build().expect("channel");
    // `github` is held for each subject: a shared grant of it is not a thing.
    let shared = channel
        .disconnect(vault.as_ref(), Disconnect::new(GrantKey::shared("github")))
        .await
        .expect_err("per subject");
    assert!(
        matches!(shared, DisconnectError::NotOAuth { .. }),
        "{shared:?}"
    );
    let unknown = channel
        .disconnect(vault.as_ref(), Disconnect::subject("nope", "erin"))
        .await
        .expect_err("no such credential");
    assert!(
        matches!(unknown, DisconnectError::NotOAuth { .. }),
        "{unknown:?}"
    );
    assert_eq!(subjects(store.as_ref()).await, ["erin"]);
    assert_eq!(provider.count("revoked"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_endpoint_that_refuses_the_client_or_never_answers_keeps_the_grant() {
    let provider = OidcProvider::start(60).await;
    let channel = HttpChannel::builder()
        .token_timeout(Duration::from_secs(1))
        .build()
        .expect("channel");

    // A wrong client secret: the real provider refuses the client.
    let vault = vault(
        &provider,
        "http://127.0.0.1:9",
        Some(revocation_endpoint(&provider)),
    );
    let store = vault.grants().expect("grants");
    let refresh_token = connect(&provider, store.as_ref(), "fay").await;
    let meta = vault
        .list()
        .into_iter()
        .find(|m| m.name == "github")
        .expect("github");
    vault.set(meta, Secret::new("not-the-client-secret-canary"));
    let refused = channel
        .disconnect(vault.as_ref(), Disconnect::subject("github", "fay"))
        .await
        .expect_err("the client is refused");
    assert_eq!(
        refused.to_string(),
        "the `github` account of subject `fay` was not revoked at the provider (the revocation endpoint answered HTTP 401 `invalid_client`); the grant was NOT removed; disconnect again later, or force its removal"
    );
    assert_no_secret(
        &format!("{refused} {refused:?}"),
        &[refresh_token.as_str(), "not-the-client-secret-canary"],
    );
    assert_eq!(subjects(store.as_ref()).await, ["fay"]);
    assert_eq!(provider.count("revoked"), 0);
    // The grant is still valid at the provider: nothing was revoked.
    assert_eq!(present(&provider, &refresh_token).await.0, 200);

    // An endpoint that accepts the connection and never answers: refused after the timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let silent_url = format!("http://{}/revoke", silent.local_addr().expect("addr"));
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let vault = self::vault(&provider, "http://127.0.0.1:9", Some(silent_url));
    let store = vault.grants().expect("grants");
    store
        .put(
            &GrantKey::for_subject("github", "gus"),
            GrantUpdate::Connected {
                refresh_token: Secret::new("rt-gus-canary-0b7d"),
            },
        )
        .await
        .expect("connect");
    let started = std::time::Instant::now();
    let slow = channel
        .disconnect(vault.as_ref(), Disconnect::subject("github", "gus"))
        .await
        .expect_err("no answer");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(
        slow.to_string(),
        "the `github` account of subject `gus` was not revoked at the provider (the revocation endpoint did not answer within 1000 ms); the grant was NOT removed; disconnect again later, or force its removal"
    );
    assert_no_secret(&format!("{slow} {slow:?}"), &["rt-gus-canary-0b7d"]);
    assert_eq!(subjects(store.as_ref()).await, ["gus"]);
    held.abort();
}
