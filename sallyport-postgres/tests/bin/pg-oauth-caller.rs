//! One executor process of the PostgreSQL grant fleet test (`CARGO_BIN_EXE_pg-oauth-caller`):
//! its own vault holds the client secret of the per-subject OAuth credential `github`, whose
//! grants live in the PostgreSQL grant store every process shares; it calls `get_item` for
//! each subject until the time is up, so access tokens expire under it and it refreshes them
//! alongside the other processes.
//!
//! ```text
//! pg-oauth-caller DB_URL KEY_HEX TOKEN_ENDPOINT API_URL START_AT_MS SECONDS SUBJECT,SUBJECT…
//!   client id and secret in SALLYPORT_CLIENT_ID and SALLYPORT_CLIENT_SECRET;
//!   at Unix time START_AT_MS, call `get_item` every 50 ms for SECONDS for each subject at
//!   once; print `SUBJECT STATUS [CODE]` a line, `SUBJECT mismatch` when the API saw
//!   another subject's token
//! ```
//!
//! Exit codes: 0 done; 2 bad arguments or set-up failed.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sallyport_core::journal::MemoryJournal;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, MemoryVault, OAuthClient, Secret, VaultAdmin,
};
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::HttpChannel;
use sallyport_postgres::{GrantKek, PgGrantStore};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Read one item with the per-subject OAuth credential `github`.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_item", effect = observe, credential = "github")]
#[http(get = "/v1/items/{item_id}", result = Item)]
struct GetItem {
    item_id: String,
}

/// Whose token the API got.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Item {
    id: String,
}

fn fail(message: &str) -> ExitCode {
    eprintln!("{message}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [db, key, token_endpoint, api, start_at, seconds, subjects] = args.as_slice() else {
        return fail(
            "usage: pg-oauth-caller DB_URL KEY_HEX TOKEN_ENDPOINT API_URL START_AT_MS SECONDS SUBJECTS",
        );
    };
    let (Ok(start_at), Ok(seconds)) = (start_at.parse::<u64>(), seconds.parse::<u64>()) else {
        return fail("START_AT_MS and SECONDS are numbers");
    };
    let (Ok(client_id), Ok(client_secret)) = (
        std::env::var("SALLYPORT_CLIENT_ID"),
        std::env::var("SALLYPORT_CLIENT_SECRET"),
    ) else {
        return fail("SALLYPORT_CLIENT_ID and SALLYPORT_CLIENT_SECRET are set");
    };
    let Ok(kek) = GrantKek::from_secret(&Secret::new(key.as_str())) else {
        return fail("KEY_HEX is 64 hex digits");
    };
    let subjects: Vec<String> = subjects.split(',').map(str::to_owned).collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("runtime: {e}")),
    };
    runtime.block_on(async move {
        let grants = match PgGrantStore::builder(db, kek).connect().await {
            Ok(grants) => grants,
            Err(e) => return fail(&format!("grant store: {e}")),
        };
        let vault = MemoryVault::new();
        if let Err(e) = VaultAdmin::add(
            &vault,
            CredentialMeta::new(
                "github",
                CredentialKind::OAuthRefresh(
                    OAuthClient::new(client_id, token_endpoint.as_str())
                        .with_scopes(["api:read"])
                        .per_subject(),
                ),
                Binding::url(api.as_str()),
            ),
            Secret::new(client_secret),
        ) {
            return fail(&format!("vault: {e}"));
        }
        let vault = vault.with_grant_store(Arc::new(grants));
        let catalog = match Catalog::builder().action::<GetItem>().build() {
            Ok(c) => c,
            Err(e) => return fail(&format!("catalog: {e}")),
        };
        let channel = match HttpChannel::builder().build() {
            Ok(c) => c,
            Err(e) => return fail(&format!("channel: {e}")),
        };
        let executor = match Executor::builder(catalog)
            .journal(MemoryJournal::new())
            .vault_arc(Arc::new(vault))
            .channel(channel)
            .build()
        {
            Ok(e) => Arc::new(e),
            Err(e) => return fail(&format!("executor: {e}")),
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(start_at.saturating_sub(now))).await;
        let until = Instant::now() + Duration::from_secs(seconds);
        let tasks: Vec<_> = subjects
            .into_iter()
            .map(|subject| {
                let executor = Arc::clone(&executor);
                tokio::spawn(async move {
                    let session = Session::new(format!("fleet-{subject}")).for_subject(&subject);
                    let mut i = 0u32;
                    while Instant::now() < until {
                        let r = executor
                            .call("get_item", json!({"item_id": format!("i{i}")}), &session)
                            .await;
                        match &r.code {
                            Some(code) => println!("{subject} {} {}", r.status, code.as_str()),
                            None => println!("{subject} {}", r.status),
                        }
                        if r.data.as_ref().is_some_and(|d| d["id"] != json!(subject)) {
                            println!("{subject} mismatch");
                        }
                        i += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            if task.await.is_err() {
                return fail("a caller task panicked");
            }
        }
        ExitCode::SUCCESS
    })
}
