//! One executor process on a PostgreSQL journal, for the tests that run several against one
//! database and one HTTP upstream (`CARGO_BIN_EXE_pg-executor`).
//!
//! `pg-executor JOURNAL_URL UPSTREAM_URL CALLS IN_FLIGHT START_AT_MS [LEASE_MS [report]]` waits until
//! the Unix time `START_AT_MS` (so processes spawned one after another start together),
//! connects (with attempt leases of `LEASE_MS`, default the journal's), and makes `CALLS`
//! state-changing calls (`IN_FLIGHT` at a time) through a real executor with the HTTP
//! channel, a bearer credential and approving consent.
//!
//! With a seventh argument `report` it goes on whatever a call answers (the journal's server
//! may go away mid-run): a call refused unsent with `journal_unavailable` is made again
//! 100 ms later, as an agent would, until it gets another answer. It prints each call's
//! last answer as one JSON line on stdout, with `at_ms`, the Unix time in ms it came (the
//! failover test times the recovery with it), and before it exits waits (up to 60 s) until
//! the records it kept through an outage are written, printing
//! `{"kept_at_exit": N, "refused_unsent": M}` last (M: the refused tries).
//!
//! `PG_EXECUTOR_IDLE_IN_TRANSACTION_MS`, when set, is the journal's idle-in-transaction limit.
//!
//! Exit codes: 0 every call completed (or, with `report`, every call answered); 2 bad
//! arguments or setup; 3 the journal did not connect (the error is printed); 4 a call did
//! not complete (its result is printed).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_postgres::PostgresJournal;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Queue one build of a project.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_deployment", effect = external_commitment, retry = idempotency_key,
         credential = "deploy-api")]
#[http(post = "/v1/projects/{project_id}/deployments", result = Created)]
struct CreateDeployment {
    project_id: String,
    build_id: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Created {
    id: String,
}

/// The Unix time in milliseconds.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn fail(code: u8, what: &str) -> ExitCode {
    eprintln!("{what}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (
        Some(journal_url),
        Some(upstream),
        Some(Ok(calls)),
        Some(Ok(in_flight)),
        Some(Ok(start_at)),
    ) = (
        args.first(),
        args.get(1),
        args.get(2).map(|n| n.parse::<usize>()),
        args.get(3).map(|n| n.parse::<usize>()),
        args.get(4).map(|t| t.parse::<u64>()),
    )
    else {
        return fail(
            2,
            "usage: pg-executor JOURNAL_URL UPSTREAM_URL CALLS IN_FLIGHT START_AT_MS [LEASE_MS [report]]",
        );
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(2, &format!("runtime: {e}")),
    };
    runtime.block_on(async {
        let mut builder = PostgresJournal::builder(journal_url)
            .owner(format!("pg-executor-{}", std::process::id()));
        // The idle-in-transaction limit, for the test that stops this process mid-batch.
        if let Some(ms) = std::env::var("PG_EXECUTOR_IDLE_IN_TRANSACTION_MS")
            .ok()
            .and_then(|ms| ms.parse::<u64>().ok())
        {
            builder = builder.idle_in_transaction_timeout(Duration::from_millis(ms));
        }
        let report = args.get(6).is_some_and(|a| a == "report");
        match args.get(5).map(|ms| ms.parse::<u64>()) {
            Some(Ok(ms)) => builder = builder.lease(Duration::from_millis(ms)),
            Some(Err(_)) => return fail(2, "LEASE_MS is not a number"),
            None => {}
        }
        let journal = match builder.connect().await {
            Ok(journal) => journal,
            Err(e) => return fail(3, &format!("connect failed: {e:?}")),
        };
        let vault = Arc::new(MemoryVault::new());
        vault.set(
            CredentialMeta::new("deploy-api", CredentialKind::Bearer, Binding::url(upstream)),
            Secret::new("token-pg-executor"),
        );
        let catalog = match Catalog::builder().action::<CreateDeployment>().build() {
            Ok(catalog) => catalog,
            Err(e) => return fail(2, &format!("catalog: {e}")),
        };
        let channel = match HttpChannel::builder().base_url(upstream).build() {
            Ok(channel) => channel,
            Err(e) => return fail(2, &format!("channel: {e}")),
        };
        let executor = match Executor::builder(catalog)
            .journal(journal)
            .vault_arc(vault)
            .channel(channel)
            .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
            .build()
        {
            Ok(executor) => executor,
            Err(e) => return fail(2, &format!("executor: {e}")),
        };
        tokio::time::sleep(Duration::from_millis(start_at.saturating_sub(unix_ms()))).await;

        let pid = std::process::id();
        let refused = AtomicU64::new(0);
        let session = Session::new(format!("pg-executor-{pid}"));
        let lanes = (0..in_flight.max(1)).map(|lane| {
            let (executor, session, refused) = (&executor, &session, &refused);
            async move {
                for i in (lane..calls).step_by(in_flight.max(1)) {
                    let args =
                        json!({"project_id": format!("proj_{i}"), "build_id": format!("b{i}-p{pid}")});
                    let mut result = executor.call("create_deployment", args.clone(), session).await;
                    while report && result.code_str() == Some("journal_unavailable") {
                        // Nothing was sent: try again a little later, as an agent would.
                        refused.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        result = executor.call("create_deployment", args.clone(), session).await;
                    }
                    if report {
                        // The answer, with when it came (Unix ms), for the tests that time
                        // the journal's recovery.
                        let mut line: serde_json::Value =
                            serde_json::from_str(&result.to_json()).unwrap_or_default();
                        if let Some(fields) = line.as_object_mut() {
                            fields.insert("at_ms".to_owned(), json!(unix_ms()));
                        }
                        println!("{line}");
                    } else if result.status != Status::Completed {
                        return Err(format!("call {i} did not complete: {}", result.to_json()));
                    }
                }
                Ok(())
            }
        });
        for outcome in futures_util::future::join_all(lanes).await {
            if let Err(e) = outcome {
                return fail(4, &e);
            }
        }
        if report {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while executor.kept_records() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            println!(
                "{{\"kept_at_exit\": {}, \"refused_unsent\": {}}}",
                executor.kept_records(),
                refused.load(Ordering::Relaxed)
            );
        }
        ExitCode::SUCCESS
    })
}
