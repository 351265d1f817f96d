//! A credential for each subject: one OAuth credential `github` configured `per_subject`,
//! one grant per end user, and sessions that name the user they act for. Against a real
//! HTTP API on 127.0.0.1:0 that knows which user each token belongs to and records, for
//! every request, the user the call was made for (the path) and the user whose token came
//! (the `Authorization` header):
//!
//! - 20 users calling at once, 240 calls in flight together (the API holds each request until
//!   all have arrived): every call is sent with its own user's token, none with another's;
//! - a user without a grant, and a session without a user: `credential_unavailable`, nothing
//!   sent, a reason the agent can act on, no URL in the result, and a `ConnectNeeded` for
//!   the host;
//! - a static bearer credential under a session with a subject works as before;
//! - against the real provider (`oidc-provider`, tokens of 2 seconds, refresh tokens rotated
//!   with reuse detection): a grant revoked for one user marks that user only for
//!   reconnection, and the others keep refreshing and working.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sallyport_core::journal::MemoryJournal;
use sallyport_core::outcome::{ActionResult, ConnectNeeded};
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, FileVault, GrantKey, GrantStore, GrantUpdate,
    OAuthClient, Secret, Vault, VaultAdmin,
};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::oidc::{IntrospectingApi, OidcProvider, WEBAPP_CLIENT};
use sallyport_tests::vault_rig::{PASSPHRASE, fast_kdf};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Ask the API which user the call's token belongs to.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "whoami", effect = observe, credential = "github")]
#[http(get = "/v1/whoami/{user}", result = Who)]
struct WhoAmI {
    /// The user the call is made for (the API compares it with the token's user).
    user: String,
}

/// The same, with the static bearer credential `service`.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "service_whoami", effect = observe, credential = "service")]
#[http(get = "/v1/whoami/{user}", result = Who)]
struct ServiceWhoAmI {
    /// The user the call is made for.
    user: String,
}

/// One item, read with `github` (for the real provider's API, which answers `id`).
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_item", effect = observe, credential = "github")]
#[http(get = "/v1/items/{item_id}", result = Item)]
struct GetItem {
    /// Any item.
    item_id: String,
}

/// Whose token the API got.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Who {
    /// The token's user.
    subject: String,
}

/// Who the provider says the token belongs to.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Item {
    /// The token's subject.
    id: String,
}

/// What the API saw.
#[derive(Default)]
struct Seen {
    /// token → its user.
    tokens: Mutex<HashMap<String, String>>,
    requests: AtomicU64,
    /// Requests whose token belonged to another user than the one the call was for.
    mismatched: AtomicU64,
    /// Requests without a token the API knows.
    unknown_token: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    /// Requests arrived so far, and how many to hold until they are all in flight together.
    arrived: tokio::sync::watch::Sender<u64>,
    hold_until: AtomicU64,
}

async fn whoami(
    State(seen): State<Arc<Seen>>,
    Path(user): Path<String>,
    headers: HeaderMap,
) -> Response {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    seen.max_in_flight.fetch_max(now, Ordering::SeqCst);
    // Hold every request until `hold_until` have arrived (or 30 s passed), so the calls of
    // all users are in flight together.
    seen.arrived.send_modify(|n| *n += 1);
    let target = seen.hold_until.load(Ordering::SeqCst);
    let mut arrived = seen.arrived.subscribe();
    let _ = tokio::time::timeout(Duration::from_secs(30), arrived.wait_for(|n| *n >= target)).await;
    seen.in_flight.fetch_sub(1, Ordering::SeqCst);
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let owner = seen.tokens.lock().expect("tokens").get(token).cloned();
    let Some(owner) = owner else {
        seen.unknown_token.fetch_add(1, Ordering::SeqCst);
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "unknown token"})),
        )
            .into_response();
    };
    if owner != user {
        seen.mismatched.fetch_add(1, Ordering::SeqCst);
    }
    axum::Json(json!({ "subject": owner })).into_response()
}

/// The API on 127.0.0.1:0: its URL and what it saw.
async fn api() -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen {
        arrived: tokio::sync::watch::Sender::new(0),
        ..Seen::default()
    });
    let app = Router::new()
        .route("/v1/whoami/{user}", get(whoami))
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, seen)
}

fn per_subject(token_endpoint: &str) -> CredentialKind {
    CredentialKind::OAuthRefresh(
        OAuthClient::new(WEBAPP_CLIENT.0, token_endpoint)
            .with_scopes(["api:read"])
            .per_subject(),
    )
}

/// A file vault holding `github` (per subject, bound to `url`) and `service` (a static
/// bearer token of user `service`, bound to `url` too).
fn vault(dir: &tempfile::TempDir, url: &str, token_endpoint: &str) -> FileVault {
    let vault =
        FileVault::create(dir.path().join("subjects.spv"), PASSPHRASE, fast_kdf()).expect("vault");
    vault
        .add(
            CredentialMeta::new("github", per_subject(token_endpoint), Binding::url(url)),
            Secret::new(WEBAPP_CLIENT.1),
        )
        .expect("add github");
    vault
        .add(
            CredentialMeta::new("service", CredentialKind::Bearer, Binding::url(url)),
            Secret::new("service-token-canary-5b1e"),
        )
        .expect("add service");
    vault
}

fn executor(catalog: Catalog, vault: Arc<dyn Vault>) -> Executor {
    Executor::builder(catalog)
        .journal(MemoryJournal::new())
        .vault_arc(vault)
        .channel(HttpChannel::builder().build().expect("channel"))
        .build()
        .expect("executor")
}

/// Stores an access token of an hour for `user`, and tells the API whose it is.
async fn connect(store: &dyn GrantStore, seen: &Seen, user: &str) {
    let token = format!("tok-{user}-{:016x}", fastrand::u64(..));
    seen.tokens
        .lock()
        .expect("tokens")
        .insert(token.clone(), user.to_owned());
    let now = SystemTime::now();
    store
        .put(
            &GrantKey::for_subject("github", user),
            GrantUpdate::Issued {
                access_token: Secret::new(token),
                issued_at: now,
                expires_at: now + Duration::from_secs(3600),
                refresh_token: Some(Secret::new(format!("refresh-{user}-canary"))),
            },
        )
        .await
        .expect("store the grant");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_subjects_calling_at_once_are_each_sent_with_their_own_token_only() {
    const USERS: usize = 20;
    const CALLS_EACH: usize = 12;
    let (url, seen) = api().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // The token endpoint is never asked: every grant holds a valid access token.
    let vault = vault(&dir, &url, "http://127.0.0.1:9/token");
    let store = vault.grants().expect("grants");
    seen.hold_until
        .store((USERS * CALLS_EACH) as u64, Ordering::SeqCst);
    let users: Vec<String> = (0..USERS).map(|i| format!("user-{i:02}")).collect();
    for user in &users {
        connect(store.as_ref(), &seen, user).await;
    }
    let executor = Arc::new(executor(
        Catalog::builder()
            .action::<WhoAmI>()
            .build()
            .expect("catalog"),
        Arc::new(vault),
    ));
    let mut calls = Vec::new();
    for round in 0..CALLS_EACH {
        for user in &users {
            let executor = Arc::clone(&executor);
            let user = user.clone();
            calls.push(tokio::spawn(async move {
                let session = Session::new(format!("chat-{user}-{round}")).for_subject(&user);
                let result = executor
                    .call("whoami", json!({ "user": user }), &session)
                    .await;
                (user, result)
            }));
        }
    }
    let mut completed = 0;
    for call in calls {
        let (user, result) = call.await.expect("call task");
        assert_eq!(result.status, Status::Completed, "{}", result.summary());
        let data = result.data.as_ref().expect("data");
        assert_eq!(
            data["subject"],
            json!(user),
            "{user}'s call carried another token"
        );
        completed += 1;
    }
    assert_eq!(completed, USERS * CALLS_EACH);
    let max_in_flight = seen.max_in_flight.load(Ordering::SeqCst);
    eprintln!(
        "{completed} calls of {USERS} users; at most {max_in_flight} in flight at the API together"
    );
    assert_eq!(
        seen.requests.load(Ordering::SeqCst),
        (USERS * CALLS_EACH) as u64
    );
    assert_eq!(seen.mismatched.load(Ordering::SeqCst), 0);
    assert_eq!(seen.unknown_token.load(Ordering::SeqCst), 0);
    // Every audit record names the user its call acted for: the one its session names.
    let records = executor.journal().records().await.expect("records");
    assert_eq!(records.len(), USERS * CALLS_EACH);
    for record in &records {
        let user = record
            .event
            .subject
            .as_deref()
            .expect("a subject on the record");
        assert!(
            record
                .event
                .session_id
                .starts_with(&format!("chat-{user}-")),
            "{} recorded as {user}",
            record.event.session_id
        );
    }
    assert_eq!(
        max_in_flight,
        (USERS * CALLS_EACH) as u64,
        "not every call was in flight together"
    );
}

fn assert_connect_refusal(result: &ActionResult, expected: &ConnectNeeded, reason_says: &str) {
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(result.code_str(), Some("credential_unavailable"));
    let reason = result.reason.as_deref().unwrap_or_default();
    assert!(reason.contains(reason_says), "{reason}");
    assert!(reason.contains("nothing was sent"), "{reason}");
    assert_eq!(result.connect_needed(), Some(expected));
    // What the agent sees: no link, no URL, nothing of the host-facing signal.
    let json = result.to_json();
    assert!(!json.contains("://"), "{json}");
    assert!(!json.contains("127.0.0.1"), "{json}");
    assert!(
        !json.contains("connect_needed") && !json.contains("\"connect\""),
        "{json}"
    );
    assert!(!result.summary().contains("://"));
}

#[tokio::test]
async fn a_subject_without_a_grant_is_refused_before_anything_is_sent_and_the_host_is_told_to_connect()
 {
    let (url, seen) = api().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let vault = vault(&dir, &url, "http://127.0.0.1:9/token");
    connect(vault.grants().expect("grants").as_ref(), &seen, "alice").await;
    let executor = executor(
        Catalog::builder()
            .action::<WhoAmI>()
            .build()
            .expect("catalog"),
        Arc::new(vault),
    );
    // Zoe never connected her account.
    let zoe = Session::new("chat-zoe").for_subject("zoe");
    let result = executor.call("whoami", json!({"user": "zoe"}), &zoe).await;
    assert_connect_refusal(
        &result,
        &ConnectNeeded::new("github", Some("zoe".into()), false),
        "the user has not connected their `github` account; nothing was sent; ask them to connect it",
    );
    // A session that names no user cannot use a credential held for each user.
    let nobody = Session::new("chat-anon");
    let result = executor
        .call("whoami", json!({"user": "alice"}), &nobody)
        .await;
    assert_connect_refusal(
        &result,
        &ConnectNeeded::new("github", None, false),
        "does not say which user it acts for",
    );
    assert_eq!(
        seen.requests.load(Ordering::SeqCst),
        0,
        "the API saw a request"
    );
    // Alice, connected, is served.
    let alice = Session::new("chat-alice").for_subject("alice");
    let result = executor
        .call("whoami", json!({"user": "alice"}), &alice)
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.summary());
    assert_eq!(result.connect_needed(), None);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
    assert_eq!(seen.mismatched.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_static_credential_works_unchanged_under_a_session_with_a_subject() {
    let (url, seen) = api().await;
    seen.tokens
        .lock()
        .expect("tokens")
        .insert("service-token-canary-5b1e".into(), "service".into());
    let dir = tempfile::tempdir().expect("tempdir");
    let vault = vault(&dir, &url, "http://127.0.0.1:9/token");
    let executor = executor(
        Catalog::builder()
            .action::<ServiceWhoAmI>()
            .build()
            .expect("catalog"),
        Arc::new(vault),
    );
    for session in [
        Session::new("chat-1").for_subject("alice"),
        Session::new("chat-2"),
    ] {
        let result = executor
            .call("service_whoami", json!({"user": "service"}), &session)
            .await;
        assert_eq!(result.status, Status::Completed, "{}", result.summary());
        assert_eq!(result.data.as_ref().expect("data")["subject"], "service");
    }
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
    assert_eq!(seen.mismatched.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_refused_for_one_subject_marks_only_that_subject_and_the_others_keep_working() {
    const TTL: u64 = 2;
    let provider = OidcProvider::start(TTL).await;
    let api = IntrospectingApi::start(&provider).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let vault = vault(&dir, api.url(), &provider.token_endpoint());
    let store = vault.grants().expect("grants");
    let users = ["ana", "ben", "cyd"];
    let mut refresh_tokens = HashMap::new();
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
        refresh_tokens.insert(user, grant.refresh_token);
    }
    let executor = Arc::new(executor(
        Catalog::builder()
            .action::<GetItem>()
            .build()
            .expect("catalog"),
        Arc::new(vault),
    ));
    let round = |n: u32| {
        let executor = Arc::clone(&executor);
        async move {
            let calls = users.map(|user| {
                let executor = Arc::clone(&executor);
                tokio::spawn(async move {
                    let session = Session::new(format!("chat-{user}")).for_subject(user);
                    executor
                        .call("get_item", json!({"item_id": format!("i{n}")}), &session)
                        .await
                })
            });
            let mut out = Vec::new();
            for call in calls {
                out.push(call.await.expect("call task"));
            }
            out
        }
    };
    // Each user's first call refreshes that user's grant; the API says whose token it got.
    for (user, result) in users.iter().zip(round(0).await) {
        assert_eq!(result.status, Status::Completed, "{}", result.summary());
        assert_eq!(result.data.as_ref().expect("data")["id"], json!(user));
    }
    // Ben's grant is revoked at the provider; the tokens expire.
    provider.revoke(&refresh_tokens["ben"], WEBAPP_CLIENT).await;
    tokio::time::sleep(Duration::from_secs(TTL + 1)).await;
    let requests_before = api.requests();
    let results = round(1).await;
    for (user, result) in users.iter().zip(&results) {
        if *user == "ben" {
            assert_connect_refusal(
                result,
                &ConnectNeeded::new("github", Some("ben".into()), true),
                "the user's `github` account must be connected again",
            );
        } else {
            assert_eq!(result.status, Status::Completed, "{}", result.summary());
            assert_eq!(result.data.as_ref().expect("data")["id"], json!(user));
        }
    }
    // Only ben's grant is marked; a later call of his is refused before anything is sent.
    let listed = store.list(Some("github")).await.expect("list");
    let marked: Vec<_> = listed
        .iter()
        .filter(|g| g.reconnect.is_some())
        .map(|g| g.subject.as_deref())
        .collect();
    assert_eq!(marked, [Some("ben")]);
    let sent = api.requests();
    let result = executor
        .call(
            "get_item",
            json!({"item_id": "again"}),
            &Session::new("chat-ben").for_subject("ben"),
        )
        .await;
    assert_eq!(result.code_str(), Some("credential_unavailable"));
    assert_eq!(api.requests(), sent, "ben's refused call reached the API");
    // The others keep refreshing and working after another expiry.
    tokio::time::sleep(Duration::from_secs(TTL + 1)).await;
    for (user, result) in users.iter().zip(round(2).await) {
        if *user != "ben" {
            assert_eq!(result.status, Status::Completed, "{}", result.summary());
            assert_eq!(result.data.as_ref().expect("data")["id"], json!(user));
        }
    }
    assert_eq!(provider.reuse_detections(), 0);
    eprintln!(
        "API requests: {} before the revocation round, {} at the end; refresh grants issued: {}",
        requests_before,
        api.requests(),
        provider.tokens_issued("refresh_token")
    );
}
