//! An executor process that only carries out approved calls (`CARGO_BIN_EXE_approvals-worker`):
//! the executor of [`sallyport_tests::approvals_rig`] running its approval worker, for the
//! tests and the bench of decisions made in other processes.
//!
//! ```text
//! approvals-worker JOURNAL UPSTREAM_URL [--postgres] [--poll] INTERVAL_MS
//!   JOURNAL        a SQLite file, or with --postgres a PostgreSQL connection string
//!   INTERVAL_MS    the worker's fallback interval
//!   --poll         today's polling worker instead of `run_approval_worker`: list the
//!                  approved calls every INTERVAL_MS, never woken by a decision
//! ```
//!
//! Prints `ready` once the executor is built and its worker started, then runs until its
//! standard input closes (the test or bench that started it ends, however it ends).
//! Exit codes: 0 stdin closed; 2 bad arguments; 4 the journal did not open.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use sallyport_tests::approvals_rig::{self, HostOptions};

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let postgres = take_flag(&mut args, "--postgres");
    let poll = take_flag(&mut args, "--poll");
    let [journal, upstream, interval] = args.as_slice() else {
        eprintln!("usage: approvals-worker JOURNAL UPSTREAM_URL [--postgres] [--poll] INTERVAL_MS");
        return ExitCode::from(2);
    };
    let Ok(interval) = interval.parse::<u64>().map(Duration::from_millis) else {
        eprintln!("INTERVAL_MS takes milliseconds");
        return ExitCode::from(2);
    };
    let options = HostOptions::new(journal.as_str(), upstream.as_str());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let vault = approvals_rig::vault(&options.upstream);
        let executor = if postgres {
            let connected = sallyport_postgres::PostgresJournal::builder(journal)
                .connect()
                .await;
            let Ok(pg) = connected else {
                println!("error the journal did not connect");
                return ExitCode::from(4);
            };
            approvals_rig::executor_on(&options, vault, Arc::new(pg))
        } else {
            approvals_rig::executor(&options, vault)
        };
        let worker = executor.clone();
        tokio::spawn(async move {
            if poll {
                // The worker as it was before stores could wake it.
                loop {
                    if let Err(e) = worker.resume_approvals().await {
                        eprintln!("approved calls could not be listed: {e}");
                    }
                    tokio::time::sleep(interval).await;
                }
            } else {
                worker.run_approval_worker(interval).await;
            }
        });
        println!("ready");
        let _ = tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink)
        })
        .await;
        ExitCode::SUCCESS
    })
}

/// Removes `flag` from `args`; whether it was there.
fn take_flag(args: &mut Vec<String>, flag: &str) -> bool {
    let before = args.len();
    args.retain(|a| a != flag);
    args.len() != before
}
