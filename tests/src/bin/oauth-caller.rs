//! One executor process of the OAuth fleet test (`CARGO_BIN_EXE_oauth-caller`): it unlocks
//! the file vault that every process shares, holding the OAuth refresh credential `api`, and
//! calls the observe action `get_item` against the API its credential is bound to until the time is up, so its access
//! tokens expire under it and it refreshes them alongside the other processes.
//!
//! ```text
//! oauth-caller VAULT PASSPHRASE START_AT_MS SECONDS
//!   at Unix time START_AT_MS, call `get_item` every 50 ms for SECONDS;
//!   print each result's status (and code, if any) a line
//! ```
//!
//! Exit codes: 0 done; 2 bad arguments or set-up failed.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sallyport_core::journal::MemoryJournal;
use sallyport_core::vault::FileVault;
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::HttpChannel;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Read one item with the OAuth credential `api`.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_item", effect = observe, credential = "api")]
#[http(get = "/v1/items/{item_id}", result = Item)]
struct GetItem {
    item_id: String,
}

/// Who the API says called.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Item {
    id: String,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [vault, passphrase, start_at, seconds] = args.as_slice() else {
        eprintln!("usage: oauth-caller VAULT PASSPHRASE START_AT_MS SECONDS");
        return ExitCode::from(2);
    };
    let (Ok(start_at), Ok(seconds)) = (start_at.parse::<u64>(), seconds.parse::<u64>()) else {
        eprintln!("START_AT_MS and SECONDS are numbers");
        return ExitCode::from(2);
    };
    let vault = FileVault::open(vault);
    if let Err(e) = vault.unlock(passphrase) {
        eprintln!("unlock: {e}");
        return ExitCode::from(2);
    }
    let catalog = match Catalog::builder().action::<GetItem>().build() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("catalog: {e}");
            return ExitCode::from(2);
        }
    };
    let channel = match HttpChannel::builder().build() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("channel: {e}");
            return ExitCode::from(2);
        }
    };
    let executor = match Executor::builder(catalog)
        .journal(MemoryJournal::new())
        .vault_arc(Arc::new(vault))
        .channel(channel)
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("executor: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async move {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(start_at.saturating_sub(now))).await;
        let session = Session::new("fleet");
        let until = Instant::now() + Duration::from_secs(seconds);
        let mut i = 0u32;
        while Instant::now() < until {
            let r = executor
                .call("get_item", json!({"item_id": format!("i{i}")}), &session)
                .await;
            match &r.code {
                Some(code) => println!("{} {}", r.status, code.as_str()),
                None => println!("{}", r.status),
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    ExitCode::SUCCESS
}
