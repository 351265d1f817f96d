//! Credentials for each user: one OAuth credential `github` held per subject, two users
//! with their own grants, and an API (started here on 127.0.0.1) that knows whose each token
//! is and checks it against the user the call is made for. Each session names the user the
//! agent acts for; the executor sends that user's token, never the other's. A third user
//! who never connected the account is refused before anything is sent, and the host (not
//! the agent) is told to have them connect it.
//!
//! `cargo run -p sallyport-examples --bin per-user` — exits 0 only when each user's call
//! carried that user's own token.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sallyport_core::journal::MemoryJournal;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, GrantKey, GrantUpdate, MemoryVault, OAuthClient,
    Secret, Vault,
};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use serde_json::json;

/// The signed-in user's profile on the code host.
#[derive(Action, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[action(name = "my_profile", effect = observe, credential = "github")]
#[http(get = "/v1/users/{login}/profile", result = Profile)]
struct MyProfile {
    /// The user the agent acts for, as the API knows them.
    login: String,
}

/// What the agent gets back.
#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Profile {
    /// Whose token the API got.
    token_owner: String,
}

/// The API's record: token → its owner, and (user asked for, token's owner) per request.
#[derive(Default)]
struct Api {
    owners: HashMap<String, String>,
    seen: Mutex<Vec<(String, String)>>,
}

async fn profile(
    State(api): State<Arc<Api>>,
    Path(login): Path<String>,
    headers: HeaderMap,
) -> Response {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let Some(owner) = api.owners.get(token).cloned() else {
        return (StatusCode::UNAUTHORIZED, "unknown token").into_response();
    };
    if let Ok(mut seen) = api.seen.lock() {
        seen.push((login, owner.clone()));
    }
    axum::Json(json!({ "token_owner": owner })).into_response()
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let users = ["alice", "bob"];
    // Each user's access token, as the provider issued it when they connected the account.
    let tokens: HashMap<&str, String> = users
        .iter()
        .map(|u| (*u, format!("demo-token-of-{u}")))
        .collect();
    let api = Arc::new(Api {
        owners: tokens
            .iter()
            .map(|(u, t)| (t.clone(), (*u).to_owned()))
            .collect(),
        seen: Mutex::default(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/v1/users/{login}/profile", axum::routing::get(profile))
        .with_state(Arc::clone(&api));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    // One OAuth credential for every user: the client is the application's, the grants are
    // each user's own (`per_subject`).
    let vault = MemoryVault::new();
    vault.set(
        CredentialMeta::new(
            "github",
            CredentialKind::OAuthRefresh(
                OAuthClient::new("demo-app", "http://127.0.0.1:9/token")
                    .with_scopes(["read:user"])
                    .per_subject(),
            ),
            Binding::url(&url),
        ),
        Secret::new("demo-client-secret"),
    );
    let grants = vault.grants().ok_or("the memory vault keeps grants")?;
    let now = SystemTime::now();
    for user in users {
        grants
            .put(
                &GrantKey::for_subject("github", user),
                GrantUpdate::Issued {
                    access_token: Secret::new(tokens[user].clone()),
                    issued_at: now,
                    expires_at: now + Duration::from_secs(3600),
                    refresh_token: Some(Secret::new(format!("demo-refresh-of-{user}"))),
                },
            )
            .await?;
    }
    for g in grants.list(Some("github")).await? {
        println!(
            "connected: {} (scopes {:?}, refresh token held: {})",
            g.subject.as_deref().unwrap_or("-"),
            g.scopes,
            g.refresh_token
        );
    }

    let executor = Executor::builder(Catalog::builder().action::<MyProfile>().build()?)
        .journal(MemoryJournal::new())
        .vault(vault)
        .channel(sallyport_http::HttpChannel::builder().build()?)
        .build()?;

    let mut own_tokens = 0;
    for user in users {
        // The host names the user from its own sign-in; the agent never chooses it.
        let session = Session::new(format!("chat-{user}")).for_subject(user);
        let result = executor
            .run(
                &MyProfile {
                    login: user.to_owned(),
                },
                &session,
            )
            .await;
        println!("{user}: {}", result.result);
        let owner = result
            .result
            .data
            .as_ref()
            .and_then(|d| d["token_owner"].as_str());
        if result.result.status == Status::Completed && owner == Some(user) {
            own_tokens += 1;
        }
    }

    // Carol never connected her account: refused, nothing sent; the agent reads a reason it
    // can act on, and the host reads which account to have her connect.
    let carol = Session::new("chat-carol").for_subject("carol");
    let result = executor
        .run(
            &MyProfile {
                login: "carol".into(),
            },
            &carol,
        )
        .await;
    println!("carol: {}", result.result);
    if let Some(connect) = result.result.connect_needed() {
        println!(
            "host: ask {} to connect their `{}` account (the link goes to them, not to the agent)",
            connect.subject.as_deref().unwrap_or("the user"),
            connect.credential
        );
    }

    let seen = api.seen.lock().map(|s| s.clone()).unwrap_or_default();
    let crossed = seen.iter().filter(|(asked, owner)| asked != owner).count();
    println!(
        "the API saw {} requests: {} with the token of the user asked for, {crossed} with another user's",
        seen.len(),
        seen.len() - crossed
    );
    Ok(
        if own_tokens == users.len() && crossed == 0 && seen.len() == users.len() {
            println!("ok: each user's call carried that user's own token");
            ExitCode::SUCCESS
        } else {
            println!("FAILED: a call did not carry its own user's token");
            ExitCode::FAILURE
        },
    )
}
