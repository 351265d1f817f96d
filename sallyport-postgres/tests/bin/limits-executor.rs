//! One executor process with a rate-limiting policy, for the tests that race several of them
//! on one journal (`CARGO_BIN_EXE_limits-executor`).
//!
//! `limits-executor JOURNAL UPSTREAM_URL SESSION CALLS START_AT_MS [--local]` waits until the
//! Unix time `START_AT_MS` (so processes spawned one after another race), opens the journal
//! (`sqlite:PATH` for a SQLite file, else a PostgreSQL URL), and makes `CALLS` state-changing
//! calls all at once in session `SESSION`, through a real executor with the HTTP channel and
//! approving consent, under a policy that allows 5 calls of the action per session per hour.
//! With `--local` the executor keeps the policy's counts in memory (per process) instead of
//! the journal's shared store.
//!
//! Prints one line per call: `completed`, or `denied <reason>`. Exit codes: 0 every call
//! completed or was denied by the policy; 2 bad arguments or setup; 3 the journal did not
//! open (the error is printed); 4 a call ended otherwise (its result is printed).

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sallyport_core::code::RefusalCode;
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::{Journal, SqliteJournal};
use sallyport_core::policy::{Policy, PolicyDecision, PolicyRequest};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_postgres::PostgresJournal;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Queue one build of a project.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_deployment", effect = external_commitment, retry = idempotency_key)]
#[http(post = "/v1/projects/{project_id}/deployments", result = Created)]
struct CreateDeployment {
    project_id: String,
    build_id: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Created {
    id: String,
}

/// Five deployments per session per hour.
#[derive(Debug)]
struct FiveAnHour;

impl Policy for FiveAnHour {
    fn name(&self) -> &str {
        "five-an-hour"
    }

    fn decide(&self, request: &PolicyRequest<'_>) -> PolicyDecision {
        if request.calls.hour >= 5 {
            PolicyDecision::deny("at most 5 deployments per session per hour").with_rule("rate")
        } else {
            PolicyDecision::allow()
        }
    }
}

fn fail(code: u8, what: &str) -> ExitCode {
    eprintln!("{what}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(journal_at), Some(upstream), Some(session), Some(Ok(calls)), Some(Ok(start_at))) = (
        args.first(),
        args.get(1),
        args.get(2),
        args.get(3).map(|n| n.parse::<usize>()),
        args.get(4).map(|t| t.parse::<u64>()),
    ) else {
        return fail(
            2,
            "usage: limits-executor JOURNAL UPSTREAM_URL SESSION CALLS START_AT_MS [--local]",
        );
    };
    let local = args.get(5).is_some_and(|a| a == "--local");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(2, &format!("runtime: {e}")),
    };
    runtime.block_on(async {
        let journal: std::sync::Arc<dyn Journal> = match journal_at.strip_prefix("sqlite:") {
            Some(path) => match SqliteJournal::open(path) {
                Ok(journal) => std::sync::Arc::new(journal),
                Err(e) => return fail(3, &format!("open failed: {e:?}")),
            },
            None => match PostgresJournal::builder(journal_at)
                .owner(format!("limits-executor-{}", std::process::id()))
                .connect()
                .await
            {
                Ok(journal) => std::sync::Arc::new(journal),
                Err(e) => return fail(3, &format!("connect failed: {e:?}")),
            },
        };
        let catalog = match Catalog::builder().action::<CreateDeployment>().build() {
            Ok(catalog) => catalog,
            Err(e) => return fail(2, &format!("catalog: {e}")),
        };
        let channel = match HttpChannel::builder().base_url(upstream).build() {
            Ok(channel) => channel,
            Err(e) => return fail(2, &format!("channel: {e}")),
        };
        let mut builder = Executor::builder(catalog)
            .journal_arc(journal)
            .channel(channel)
            .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
            .policy(FiveAnHour);
        if local {
            builder = builder.local_call_counts();
        }
        let executor = match builder.build() {
            Ok(executor) => executor,
            Err(e) => return fail(2, &format!("executor: {e}")),
        };
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        tokio::time::sleep(Duration::from_millis(start_at.saturating_sub(now_ms))).await;

        let session = Session::new(session.as_str());
        let pid = std::process::id();
        let results = futures_util::future::join_all((0..calls).map(|i| {
            let args = json!({"project_id": format!("proj_{pid}_{i}"), "build_id": "b1"});
            executor.call("create_deployment", args, &session)
        }))
        .await;
        let mut code = ExitCode::SUCCESS;
        for result in results {
            match result.status {
                Status::Completed => println!("completed"),
                Status::Rejected if result.code == Some(RefusalCode::PolicyDenied.into()) => {
                    println!("denied {}", result.reason.as_deref().unwrap_or(""));
                }
                _ => {
                    eprintln!("a call ended otherwise: {}", result.to_json());
                    code = ExitCode::from(4);
                }
            }
        }
        code
    })
}
