//! One process deciding approvals on a journal file, for the test that races several of them
//! on one path (`CARGO_BIN_EXE_approval-decider`).
//!
//! `approval-decider JOURNAL START_AT_MS ROUND_MS approve|deny ID…` opens the journal, then
//! for round `r` waits until the Unix time `START_AT_MS + r × ROUND_MS` (so processes
//! started one after another decide each approval at the same instant) and decides the
//! `r`-th approval through `sallyport_kernel::approval::decide`, the path every front end
//! takes. It prints one line a round: `ROUND ID recorded|already|expired`.
//!
//! Exit codes: 0 every round answered; 2 bad arguments; 3 the journal did not open; 4 a
//! decision failed (the error is printed).

use std::process::ExitCode;
use std::time::Duration;

use sallyport_kernel::approval::{self, ApprovalId, Decided, Decider, Verdict};
use sallyport_sqlite::SqliteJournal;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), Some(Ok(start_at)), Some(Ok(round_ms)), Some(verdict)) = (
        args.first(),
        args.get(1).map(|t| t.parse::<u64>()),
        args.get(2).map(|t| t.parse::<u64>()),
        args.get(3).and_then(|v| match v.as_str() {
            "approve" => Some(Verdict::Approve),
            "deny" => Some(Verdict::Deny),
            _ => None,
        }),
    ) else {
        eprintln!("usage: approval-decider JOURNAL START_AT_MS ROUND_MS approve|deny ID…");
        return ExitCode::from(2);
    };
    let ids: Vec<ApprovalId> = args[4..].iter().map(ApprovalId::from_stored).collect();
    let journal = match SqliteJournal::open(path) {
        Ok(journal) => journal,
        Err(e) => {
            eprintln!("open failed: {e:?}");
            return ExitCode::from(3);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let decider = Decider::new(format!("process-{}", std::process::id()), "test");
    runtime.block_on(async {
        for (round, id) in ids.iter().enumerate() {
            let at = start_at.saturating_add(round as u64 * round_ms);
            let wait = at.saturating_sub(sallyport_kernel::clock::now_ms());
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let outcome = match approval::decide(&journal, id, verdict, &decider, None).await {
                Ok(Decided::Recorded(_)) => "recorded",
                Ok(Decided::AlreadyDecided(_)) => "already",
                Ok(Decided::Expired(_)) => "expired",
                Ok(other) => {
                    eprintln!("round {round}: unexpected {other:?}");
                    return ExitCode::from(4);
                }
                Err(e) => {
                    eprintln!("round {round}: decide failed: {e:?}");
                    return ExitCode::from(4);
                }
            };
            println!("{round} {id} {outcome}");
        }
        ExitCode::SUCCESS
    })
}
