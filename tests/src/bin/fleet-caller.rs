//! One executor process of the PostgreSQL OAuth fleet tests (`CARGO_BIN_EXE_fleet-caller`,
//! `tests/integration/oauth_fleet_pg.rs`): it opens the vault file every process shares
//! (the per-subject OAuth credential `github` and the grant store's key `grants-key`), keeps
//! the grants in the PostgreSQL grant store and its audit records in the PostgreSQL journal
//! of the same database, and keeps `IN_FLIGHT` calls in flight until the time is up, each
//! lane for one subject: three `get_item` (observe) to one `send_item` (a commitment, never
//! resent), so access tokens expire under every process and they refresh them together. A
//! lane whose call was not completed waits 50 ms before its next one.
//!
//! ```text
//! fleet-caller INDEX VAULT DB_URL START_AT_MS SECONDS IN_FLIGHT SUBJECT,SUBJECT…
//!   the vault's passphrase in SALLYPORT_VAULT_PASSPHRASE;
//!   at Unix time START_AT_MS, for SECONDS, print one line per call:
//!   START_MS END_MS INDEX SUBJECT ACTION STATUS [CODE]
//!   and `mismatch SUBJECT` when the API answered with another subject's token; on
//!   stderr, `START_MS SUBJECT ACTION: REASON` for each call with a code
//! ```
//!
//! Exit codes: 0 done; 2 bad arguments or set-up failed.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::vault::FileVault;
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_postgres::{GrantKek, PgGrantStore, PostgresJournal};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Read one item of a subject with the per-subject OAuth credential `github`.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_item", effect = observe, credential = "github")]
#[http(get = "/v1/{subject}/items/{item_id}", result = Item)]
struct GetItem {
    subject: String,
    item_id: String,
}

/// Send one item of a subject; never resent after it left.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "send_item", effect = external_commitment, reconcile = "get_item",
         credential = "github")]
#[http(post = "/v1/{subject}/sends/{item_id}", result = Item)]
struct SendItem {
    subject: String,
    item_id: String,
}

/// Whose token the API got.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Item {
    id: String,
    state: String,
}

fn fail(message: &str) -> ExitCode {
    eprintln!("{message}");
    ExitCode::from(2)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [index, vault, db, start_at, seconds, in_flight, subjects] = args.as_slice() else {
        return fail(
            "usage: fleet-caller INDEX VAULT DB_URL START_AT_MS SECONDS IN_FLIGHT SUBJECTS",
        );
    };
    let (Ok(index), Ok(start_at), Ok(seconds), Ok(in_flight)) = (
        index.parse::<usize>(),
        start_at.parse::<u64>(),
        seconds.parse::<u64>(),
        in_flight.parse::<usize>(),
    ) else {
        return fail("INDEX, START_AT_MS, SECONDS and IN_FLIGHT are numbers");
    };
    let Ok(passphrase) = std::env::var("SALLYPORT_VAULT_PASSPHRASE") else {
        return fail("SALLYPORT_VAULT_PASSPHRASE is set");
    };
    let subjects: Vec<String> = subjects.split(',').map(str::to_owned).collect();
    let vault = FileVault::open(vault);
    if let Err(e) = vault.unlock(&passphrase) {
        return fail(&format!("unlock: {e}"));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("runtime: {e}")),
    };
    runtime.block_on(async move {
        let kek = match GrantKek::from_vault(&vault, "grants-key").await {
            Ok(kek) => kek,
            Err(e) => return fail(&format!("grant key: {e}")),
        };
        let grants = match PgGrantStore::builder(db, kek).connect().await {
            Ok(grants) => grants,
            Err(e) => return fail(&format!("grant store: {e}")),
        };
        let vault = vault.with_grant_store(Arc::new(grants));
        let journal = match PostgresJournal::builder(db)
            .owner(format!("fleet-caller-{index}"))
            .connect()
            .await
        {
            Ok(journal) => journal,
            Err(e) => return fail(&format!("journal: {e}")),
        };
        let catalog = match Catalog::builder()
            .action::<GetItem>()
            .action::<SendItem>()
            .build()
        {
            Ok(c) => c,
            Err(e) => return fail(&format!("catalog: {e}")),
        };
        let channel = match HttpChannel::builder().build() {
            Ok(c) => c,
            Err(e) => return fail(&format!("channel: {e}")),
        };
        let executor = match Executor::builder(catalog)
            .journal(journal)
            .vault_arc(Arc::new(vault))
            .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
            .channel(channel)
            .build()
        {
            Ok(e) => Arc::new(e),
            Err(e) => return fail(&format!("executor: {e}")),
        };
        tokio::time::sleep(Duration::from_millis(start_at.saturating_sub(now_ms()))).await;
        let until = Instant::now() + Duration::from_secs(seconds);
        let lanes: Vec<_> = (0..in_flight)
            .map(|lane| {
                let executor = Arc::clone(&executor);
                let subject = subjects[lane % subjects.len()].clone();
                tokio::spawn(async move {
                    let session =
                        Session::new(format!("fleet-{index}-{lane}")).for_subject(&subject);
                    let mut i = 0u32;
                    while Instant::now() < until {
                        let action = if i % 4 == 3 { "send_item" } else { "get_item" };
                        let args = json!({
                            "subject": subject,
                            "item_id": format!("p{index}-l{lane}-{i}"),
                        });
                        let started = now_ms();
                        let r = executor.call(action, args, &session).await;
                        let ended = now_ms();
                        match &r.code {
                            Some(code) => println!(
                                "{started} {ended} {index} {subject} {action} {} {}",
                                r.status,
                                code.as_str()
                            ),
                            None => {
                                println!(
                                    "{started} {ended} {index} {subject} {action} {}",
                                    r.status
                                );
                            }
                        }
                        if let Some(reason) = r.reason.as_deref().filter(|_| r.code.is_some()) {
                            eprintln!("{started} {subject} {action}: {reason}");
                        }
                        if r.data.as_ref().is_some_and(|d| d["id"] != json!(subject)) {
                            println!("mismatch {subject}");
                        }
                        i += 1;
                        // A refused call comes back at once: a lane whose user must connect
                        // again waits a little before it asks again, as an agent would.
                        if r.status != Status::Completed {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                })
            })
            .collect();
        for lane in lanes {
            if lane.await.is_err() {
                return fail("a caller lane panicked");
            }
        }
        ExitCode::SUCCESS
    })
}
