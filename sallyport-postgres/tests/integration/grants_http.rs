//! Two executors (as two processes: vaults and grant stores of their own) keep their
//! users' OAuth grants in one PostgreSQL database and call the real provider's API
//! (`oidc-provider`: tokens of a few seconds, refresh tokens rotated with reuse detection)
//! through the HTTP channel, whose refresh path runs unchanged on the PostgreSQL store.

use std::sync::Arc;
use std::time::Duration;

use sallyport_core::journal::MemoryJournal;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, GrantKey, GrantStore, GrantUpdate, MemoryVault,
    OAuthClient, Secret, Vault, VaultAdmin,
};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_postgres::{GrantKek, PgGrantStore};
use sallyport_tests::oidc::{IntrospectingApi, OidcProvider, WEBAPP_CLIENT};
use sallyport_tests::postgres::TestDb;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// One item, read with `github` (the provider's API answers the token's subject as `id`).
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_item", effect = observe, credential = "github")]
#[http(get = "/v1/items/{item_id}", result = Item)]
struct GetItem {
    /// Any item.
    item_id: String,
}

/// Who the provider says the token belongs to.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Item {
    /// The token's subject.
    id: String,
}

/// A vault holding the client secret of `github` (per subject), its grants in `store`.
fn vault(api: &str, token_endpoint: &str, store: PgGrantStore) -> Arc<MemoryVault> {
    let vault = MemoryVault::new();
    VaultAdmin::add(
        &vault,
        CredentialMeta::new(
            "github",
            CredentialKind::OAuthRefresh(
                OAuthClient::new(WEBAPP_CLIENT.0, token_endpoint)
                    .with_scopes(["api:read"])
                    .per_subject(),
            ),
            Binding::url(api),
        ),
        Secret::new(WEBAPP_CLIENT.1),
    )
    .expect("add github");
    Arc::new(vault.with_grant_store(Arc::new(store)))
}

fn executor(vault: Arc<dyn Vault>) -> Executor {
    Executor::builder(
        Catalog::builder()
            .action::<GetItem>()
            .build()
            .expect("catalog"),
    )
    .journal(MemoryJournal::new())
    .vault_arc(vault)
    .channel(HttpChannel::builder().build().expect("channel"))
    .build()
    .expect("executor")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_executors_refresh_each_users_grant_in_postgres_once_per_expiry_without_reuse() {
    // A token is used for a second less than its lifetime (the provider counts whole
    // seconds) and refreshed with a third of that left: 4 s tokens are used for 2 s, which
    // a round of 24 calls fits in (2 s tokens, used for 0.67 s, were refreshed twice in a
    // round on a loaded host).
    const TTL: u64 = 4;
    const ROUNDS: usize = 3;
    let users = ["ana", "ben", "cyd"];
    let provider = OidcProvider::start(TTL).await;
    let api = IntrospectingApi::start(&provider).await;
    let db = TestDb::create().await;
    let kek = GrantKek::generate().expect("key");
    let connect = || async {
        PgGrantStore::builder(&db.url, kek.clone())
            .connect()
            .await
            .expect("grant store")
    };
    let vaults = [
        vault(api.url(), &provider.token_endpoint(), connect().await),
        vault(api.url(), &provider.token_endpoint(), connect().await),
    ];
    let store = vaults[0].grants().expect("grants");
    let mut refresh_tokens = Vec::new();
    for user in users {
        let grant = provider
            .authorize(user, "openid offline_access api:read")
            .await;
        store
            .put(
                &GrantKey::for_subject("github", user),
                GrantUpdate::Connected {
                    refresh_token: Secret::new(grant.refresh_token.clone()),
                },
            )
            .await
            .expect("connect");
        refresh_tokens.push(grant.refresh_token);
    }
    let executors = vaults
        .iter()
        .map(|v| Arc::new(executor(Arc::clone(v) as Arc<dyn Vault>)))
        .collect::<Vec<_>>();
    let refreshes_before = provider.tokens_issued("refresh_token");
    for round in 0..ROUNDS {
        // Every user calls through both executors at once, 4 calls each.
        let mut calls = Vec::new();
        for (n, executor) in executors.iter().enumerate() {
            for user in users {
                for k in 0..4 {
                    let executor = Arc::clone(executor);
                    calls.push(tokio::spawn(async move {
                        let session = Session::new(format!("chat-{user}-{n}")).for_subject(user);
                        let result = executor
                            .call(
                                "get_item",
                                json!({"item_id": format!("i{round}-{k}")}),
                                &session,
                            )
                            .await;
                        (user, result)
                    }));
                }
            }
        }
        for call in calls {
            let (user, result) = call.await.expect("call");
            assert_eq!(result.status, Status::Completed, "{}", result.summary());
            assert_eq!(
                result.data.as_ref().expect("data")["id"],
                json!(user),
                "a call for {user} was sent with another user's token"
            );
        }
        // The access tokens expire before the next round.
        tokio::time::sleep(Duration::from_secs(TTL + 1)).await;
    }
    let refreshes = provider.tokens_issued("refresh_token") - refreshes_before;
    eprintln!(
        "{} calls, {refreshes} refreshes for {} users over {ROUNDS} expiries, {} API requests",
        ROUNDS * 2 * users.len() * 4,
        users.len(),
        api.requests()
    );
    assert_eq!(
        provider.reuse_detections(),
        0,
        "a refresh token was presented twice"
    );
    assert_eq!(api.unauthorized(), 0);
    // One refresh per user per expiry across both executors, not one per executor or call.
    assert_eq!(refreshes, ROUNDS * users.len());
    // The grants in the table moved on (rotated refresh tokens), and neither the first
    // refresh token nor any current token is in the table.
    let listed = store.list(Some("github")).await.expect("list");
    assert_eq!(listed.len(), users.len());
    assert!(
        listed
            .iter()
            .all(|g| g.version == 1 + ROUNDS as u64 && g.reconnect.is_none())
    );
    let dump: Vec<String> = db
        .sql()
        .await
        .query("SELECT t::TEXT FROM sallyport_grants t", &[])
        .await
        .expect("dump")
        .iter()
        .map(|r| r.get(0))
        .collect();
    for user in users {
        let grant = vaults[1]
            .grants()
            .expect("grants")
            .current(&GrantKey::for_subject("github", user))
            .await
            .expect("current");
        let access = grant
            .access_token()
            .expect("an access token")
            .expose()
            .to_owned();
        let refresh = grant
            .refresh_token()
            .expect("a refresh token")
            .expose()
            .to_owned();
        for token in [&access, &refresh] {
            assert!(dump.iter().all(|row| !row.contains(token.as_str())));
            // Read back from PostgreSQL, and known to each vault's scrubber.
            assert!(
                vaults[1].scrubber().covers(token),
                "the scrubber misses a token"
            );
        }
    }
    for token in &refresh_tokens {
        assert!(dump.iter().all(|row| !row.contains(token.as_str())));
        assert!(
            vaults[0].scrubber().covers(token),
            "a retired refresh token is forgotten"
        );
    }
}

/// Four executor processes (`pg-oauth-caller`), each with a vault of its own holding the
/// client secret, keep two users' grants in one PostgreSQL grant store and call the real
/// provider's API for both users for 7 seconds while 2-second tokens expire under all of
/// them: the provider never sees a refresh token twice, every call completes with its own
/// user's token, and the fleet refreshes each grant about once per rotation, not once per
/// process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_sharing_postgres_grants_never_present_a_refresh_token_twice() {
    const PROCESSES: usize = 4;
    const TTL: u64 = 2;
    const SECONDS: u64 = 7;
    let subjects = ["ana", "ben"];
    let provider = OidcProvider::start(TTL).await;
    let api = IntrospectingApi::start(&provider).await;
    let db = TestDb::create().await;
    let kek = GrantKek::generate().expect("key");
    let store = PgGrantStore::builder(&db.url, kek.clone())
        .connect()
        .await
        .expect("grant store");
    for user in subjects {
        let grant = provider
            .authorize(user, "openid offline_access api:read")
            .await;
        store
            .put(
                &GrantKey::for_subject("github", user),
                GrantUpdate::Connected {
                    refresh_token: Secret::new(grant.refresh_token),
                },
            )
            .await
            .expect("connect");
    }
    let start_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .saturating_add(Duration::from_millis(2000))
        .as_millis()
        .to_string();
    let args = [
        db.url.clone(),
        kek.to_secret().expose().to_owned(),
        provider.token_endpoint(),
        api.url().to_owned(),
        start_at,
        SECONDS.to_string(),
        subjects.join(","),
    ];
    let outputs = tokio::task::spawn_blocking(move || {
        let children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                std::process::Command::new(env!("CARGO_BIN_EXE_pg-oauth-caller"))
                    .args(&args)
                    .env("SALLYPORT_CLIENT_ID", WEBAPP_CLIENT.0)
                    .env("SALLYPORT_CLIENT_SECRET", WEBAPP_CLIENT.1)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn pg-oauth-caller")
            })
            .collect();
        sallyport_tests::children::wait_all(children, std::time::Duration::from_secs(600))
    })
    .await
    .expect("children");
    let mut lines = std::collections::BTreeMap::<String, usize>::new();
    for (i, out) in outputs.iter().enumerate() {
        assert!(
            out.status.success(),
            "process {i} exited {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            *lines.entry(line.to_owned()).or_default() += 1;
        }
    }
    let refreshes = provider.tokens_issued("refresh_token");
    eprintln!(
        "{PROCESSES} processes, {} subjects, {SECONDS} s: {lines:?}; {refreshes} refreshes of {TTL} s tokens; {} reuse detections; API: {} requests, {} answered 401 (each refreshed once and sent again)",
        subjects.len(),
        provider.reuse_detections(),
        api.requests(),
        api.unauthorized(),
    );
    assert_eq!(provider.reuse_detections(), 0, "{lines:?}");
    assert_eq!(provider.count("grant_error"), 0, "{lines:?}");
    let completed: usize = subjects
        .iter()
        .map(|s| lines.get(&format!("{s} completed")).copied().unwrap_or(0))
        .sum();
    assert_eq!(
        lines.values().sum::<usize>(),
        completed,
        "every call completed: {lines:?}"
    );
    assert!(completed >= PROCESSES * subjects.len() * 20, "{lines:?}");
    // Several rotations per grant, one refresh each for the whole fleet, not one per
    // process: a 2 s token is used for 1 s (a second short of `expires_in`, for the
    // provider's whole-second clock) and refreshed with a third of that left, about one
    // refresh every 0.67 s per grant at most.
    assert!(
        (3 * subjects.len()..=(SECONDS as usize * 3 / 2 + 2) * subjects.len()).contains(&refreshes),
        "{refreshes} refreshes"
    );
    assert_eq!(api.without_token(), 0);
}
