//! One host process of the approval tests (`CARGO_BIN_EXE_approvals-host`): the executor of
//! [`sallyport_tests::approvals_rig`] over a journal file, doing one thing and exiting.
//!
//! ```text
//! approvals-host JOURNAL UPSTREAM_URL [--lease-ms N] [--precheck] [--changed] [--auto-approve]
//!                [--postgres] [--approvals N] [--decision-policy FILE] [--by NAME] COMMAND
//!   (with --postgres, JOURNAL is a PostgreSQL connection string; attempts are leased for
//!   --lease-ms and renewed until the process dies)
//!   park N [FIRST]       park invoices FIRST..FIRST+N (FIRST 0 by default); print one
//!                        approval id a line
//!   decide START_AT_MS ID...
//!                        at Unix time START_AT_MS, approve each id through Executor::decide;
//!                        print `recorded ID` or `already ID` a line
//!                        (with --by, as NAME through the front end `cli`)
//!   cli START_AT_MS ARGS...
//!                        at Unix time START_AT_MS, run the application's own command line
//!                        (`sallyport_cli::run_with_executor`) with ARGS, and exit with its code
//!   resume               carry out every approved call; print each result as JSON a line
//!   send N               send invoice N directly (with --auto-approve: consent approved at
//!                        once); print `sending` first, then the result as JSON
//!   reconcile MIN_AGE_MS [START_AT_MS]
//!                        at Unix time START_AT_MS (default now), run Executor::reconcile;
//!                        print each reconciled attempt as JSON a line
//! ```
//!
//! Exit codes: 0 done; 2 bad arguments; 4 a call or decision failed (printed).

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sallyport_core::approval::{ApprovalId, ApprovalState, Decided, Decider, Verdict};
use sallyport_core::executor::ReconcileOptions;
use sallyport_tests::approvals_rig::{self, HostOptions};

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: approvals-host JOURNAL UPSTREAM_URL [OPTIONS] COMMAND ...");
        return ExitCode::from(2);
    }
    let journal = args.remove(0);
    let upstream = args.remove(0);
    let mut options = HostOptions::new(journal, upstream);
    let mut postgres = false;
    let mut by: Option<String> = None;
    loop {
        match args.first().map(String::as_str) {
            Some("--lease-ms") if args.len() > 1 => {
                let Ok(ms) = args[1].parse::<u64>() else {
                    eprintln!("--lease-ms takes milliseconds");
                    return ExitCode::from(2);
                };
                options.lease = Duration::from_millis(ms);
                args.drain(..2);
            }
            Some("--precheck") => {
                options.precheck = true;
                args.remove(0);
            }
            Some("--changed") => {
                options.changed_definition = true;
                args.remove(0);
            }
            Some("--auto-approve") => {
                options.auto_approve = true;
                args.remove(0);
            }
            Some("--postgres") => {
                postgres = true;
                args.remove(0);
            }
            Some("--approvals") if args.len() > 1 => {
                let Ok(n) = args[1].parse::<u32>() else {
                    eprintln!("--approvals takes a count");
                    return ExitCode::from(2);
                };
                options.approvals = n;
                args.drain(..2);
            }
            Some("--decision-policy") if args.len() > 1 => {
                options.decision_policy = Some(args[1].clone().into());
                args.drain(..2);
            }
            Some("--by") if args.len() > 1 => {
                by = Some(args[1].clone());
                args.drain(..2);
            }
            _ => break,
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    if args.first().map(String::as_str) == Some("cli") {
        return cli(&runtime, &options, postgres, &args[1..]);
    }
    runtime.block_on(run(options, postgres, by, args))
}

/// The `cli` command: the application's own command line, run outside the runtime (it
/// makes its own), on an executor built inside it.
fn cli(
    runtime: &tokio::runtime::Runtime,
    options: &HostOptions,
    postgres: bool,
    args: &[String],
) -> ExitCode {
    let Some(Ok(start_at)) = args.first().map(|t| t.parse::<u64>()) else {
        eprintln!("cli takes START_AT_MS and the command line");
        return ExitCode::from(2);
    };
    let Some(executor) = runtime.block_on(build(options, postgres)) else {
        return ExitCode::from(4);
    };
    std::thread::sleep(Duration::from_millis(start_at.saturating_sub(now_ms())));
    let argv = std::iter::once("sallyport".to_owned()).chain(args[1..].iter().cloned());
    std::thread::scope(|s| {
        s.spawn(|| sallyport_cli::run_with_executor(argv, &executor))
            .join()
            .unwrap_or(ExitCode::from(4))
    })
}

/// The executor of `options`, on its SQLite file or (with `postgres`) its PostgreSQL URL.
async fn build(options: &HostOptions, postgres: bool) -> Option<sallyport_core::Executor> {
    let vault = approvals_rig::vault(&options.upstream);
    let journal = options.journal.to_string_lossy().into_owned();
    if postgres {
        // A PostgreSQL journal: attempts leased for --lease-ms, renewed until the process dies.
        let connected = sallyport_postgres::PostgresJournal::builder(&journal)
            .lease(options.lease)
            .renew_every(options.lease / 4)
            .connect()
            .await;
        let Ok(pg) = connected else {
            println!("error the journal did not connect");
            return None;
        };
        Some(approvals_rig::executor_on(
            options,
            vault,
            std::sync::Arc::new(pg),
        ))
    } else {
        Some(approvals_rig::executor(options, vault))
    }
}

async fn run(
    options: HostOptions,
    postgres: bool,
    by: Option<String>,
    args: Vec<String>,
) -> ExitCode {
    let Some(executor) = build(&options, postgres).await else {
        return ExitCode::from(4);
    };
    let session = approvals_rig::session();
    match args.first().map(String::as_str) {
        Some("park") => {
            let Some(Ok(n)) = args.get(1).map(|n| n.parse::<usize>()) else {
                eprintln!("park takes a count");
                return ExitCode::from(2);
            };
            let first = match args.get(2).map(|f| f.parse::<usize>()) {
                None => 0,
                Some(Ok(first)) => first,
                Some(Err(_)) => {
                    eprintln!("park takes a count and the first invoice number");
                    return ExitCode::from(2);
                }
            };
            for i in first..first + n {
                let result = executor
                    .call("send_invoice", approvals_rig::invoice(i), &session)
                    .await;
                let Some(id) = &result.approval_id else {
                    println!("{}", result.to_json());
                    return ExitCode::from(4);
                };
                println!("{id}");
            }
            ExitCode::SUCCESS
        }
        Some("decide") => {
            let Some(Ok(start_at)) = args.get(1).map(|t| t.parse::<u64>()) else {
                eprintln!("decide takes START_AT_MS and ids");
                return ExitCode::from(2);
            };
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            tokio::time::sleep(Duration::from_millis(start_at.saturating_sub(now))).await;
            let decider = match &by {
                Some(name) => Decider::new(name.as_str(), "cli"),
                None => Decider::new(format!("process-{}", std::process::id()), "process"),
            };
            for id in &args[2..] {
                let id = ApprovalId::from_stored(id.clone());
                match executor.decide(&id, Verdict::Approve, &decider, None).await {
                    Ok(Decided::Recorded(a)) if a.state == ApprovalState::Awaiting => {
                        println!("counted {id}");
                    }
                    Ok(Decided::Recorded(_)) => println!("recorded {id}"),
                    Ok(Decided::Refused { refusal, .. }) => println!("refused {id} {refusal}"),
                    Ok(_) => println!("already {id}"),
                    Err(e) => {
                        println!("error {id} {e}");
                        return ExitCode::from(4);
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Some("resume") => match executor.resume_approvals().await {
            Ok(results) => {
                for result in results {
                    println!("{}", result.to_json());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("error {e}");
                ExitCode::from(4)
            }
        },
        Some("send") => {
            let Some(Ok(n)) = args.get(1).map(|n| n.parse::<usize>()) else {
                eprintln!("send takes an invoice number");
                return ExitCode::from(2);
            };
            println!("sending");
            let result = executor
                .call("send_invoice", approvals_rig::invoice(n), &session)
                .await;
            println!("{}", result.to_json());
            ExitCode::SUCCESS
        }
        Some("reconcile") => {
            let Some(Ok(min_age)) = args.get(1).map(|t| t.parse::<u64>()) else {
                eprintln!("reconcile takes MIN_AGE_MS");
                return ExitCode::from(2);
            };
            if let Some(Ok(start_at)) = args.get(2).map(|t| t.parse::<u64>()) {
                tokio::time::sleep(Duration::from_millis(start_at.saturating_sub(now_ms()))).await;
            }
            let options = ReconcileOptions::new().with_min_age(Duration::from_millis(min_age));
            match executor.reconcile(options).await {
                Ok(report) => {
                    for reconciled in report {
                        println!(
                            "{}",
                            serde_json::to_string(&reconciled).expect("a report serializes")
                        );
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    println!("error {e}");
                    ExitCode::from(4)
                }
            }
        }
        _ => {
            eprintln!("unknown command");
            ExitCode::from(2)
        }
    }
}

/// The Unix time in milliseconds.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
