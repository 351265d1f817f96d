//! One consent-requiring HTTP call with [`TerminalConsent`] as the only provider, as a real
//! process, for the no-terminal tests in `tests/tests/integration/consent_terminal.rs`:
//!
//! ```text
//! terminal-consent-call BASE_URL JOURNAL_PATH
//! ```
//!
//! Calls `restart_worker` (per-call consent) against `BASE_URL`, journals into the SQLite
//! file at `JOURNAL_PATH`, and prints the agent's `ActionResult` as one JSON line on stdout.

use std::process::ExitCode;

use sallyport_core::consent::TerminalConsent;
use sallyport_core::journal::SqliteJournal;
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::HttpChannel;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Restart one worker.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "restart_worker", effect = reversible_change, consent = per_call)]
#[http(post = "/v1/workers/{worker}/restart", result = ())]
#[serde(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the fields are read by the generated request builder"
)]
struct RestartWorker {
    worker: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(base_url), Some(journal)) = (args.next(), args.next()) else {
        eprintln!("usage: terminal-consent-call BASE_URL JOURNAL_PATH");
        return ExitCode::from(2);
    };
    match run(&base_url, &journal).await {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("terminal-consent-call: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(base_url: &str, journal: &str) -> Result<String, Box<dyn std::error::Error>> {
    let catalog = Catalog::builder().action::<RestartWorker>().build()?;
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(journal)?)
        .channel(HttpChannel::builder().base_url(base_url).build()?)
        .consent(TerminalConsent::new())
        .build()?;
    let result = executor
        .call(
            "restart_worker",
            json!({"worker": "w1"}),
            &Session::new("terminal"),
        )
        .await;
    Ok(result.to_json())
}
