//! One process holding a grant's refresh right in a PostgreSQL grant store, for the test
//! that kills it mid-hold (`CARGO_BIN_EXE_grant-holder`).
//!
//! `grant-holder URL KEY_HEX CREDENTIAL SUBJECT` connects, takes the hold of
//! `CREDENTIAL`/`SUBJECT`, prints `held VERSION` and sleeps until it is killed.
//!
//! Exit codes: 2 bad arguments; 3 the store did not connect or the hold failed (the error is
//! printed).

use std::process::ExitCode;
use std::time::Duration;

use sallyport_core::vault::{GrantKey, GrantStore, Secret};
use sallyport_postgres::{GrantKek, PgGrantStore};

fn main() -> ExitCode {
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
    runtime.block_on(hold())
}

async fn hold() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, key, credential, subject] = args.as_slice() else {
        eprintln!("usage: grant-holder URL KEY_HEX CREDENTIAL SUBJECT");
        return ExitCode::from(2);
    };
    let Ok(kek) = GrantKek::from_secret(&Secret::new(key.as_str())) else {
        eprintln!("the key is not 64 hex digits");
        return ExitCode::from(2);
    };
    let store = match PgGrantStore::builder(url, kek).connect().await {
        Ok(store) => store,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(3);
        }
    };
    let key = GrantKey::for_subject(credential.as_str(), subject.as_str());
    let held = tokio::task::spawn_blocking(move || {
        let held = store.hold_refresh(&key);
        (store, held)
    })
    .await;
    match held {
        Ok((_store, Ok(Some((grant, _hold))))) => {
            println!("held {}", grant.version());
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
        Ok((_, Ok(None))) => {
            eprintln!("the store holds nothing");
            ExitCode::from(3)
        }
        Ok((_, Err(e))) => {
            eprintln!("{e}");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(3)
        }
    }
}
