//! Approvals that outlive the call: the agent's invoice is parked until a human approves it
//! from another terminal, then sent once.
//!
//! ```text
//! terminal 1:  cargo run --bin approvals
//! terminal 2:  cargo run -p sallyport-cli -- --journal <path it prints> approvals show <id>
//!              cargo run -p sallyport-cli -- --journal <path it prints> approvals approve <id>
//! ```
//!
//! The executor uses deferred consent: `create_invoice` needs a human, so the call is stored
//! in the journal with the exact request (real host), and the agent gets `pending` /
//! `awaiting_approval` with an `approval_id` and a `next` naming `check_approval`. Nothing is
//! sent. The program then does what an agent host does: it polls `check_approval` and runs
//! the approval worker, which carries out calls approved from elsewhere. When the CLI records
//! the approval, the invoice is sent once and `check_approval` returns the executed result.
//! `--wait SECONDS` bounds the wait (default 600).

use std::time::{Duration, Instant};

use sallyport_core::approval::ConsentMode;
use sallyport_core::outcome::Status;
use sallyport_core::{Executor, Session};
use sallyport_examples::catalog::demo_catalog;
use sallyport_examples::setup::Demo;
use sallyport_http::HttpChannel;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let wait = wait_seconds()?;
    let demo = Demo::start("approvals").await?;
    let executor = Executor::builder(demo_catalog()?)
        .journal_arc(demo.journal.clone())
        .vault(demo.vault)
        .channel(HttpChannel::builder().build()?)
        .consent_mode(ConsentMode::Deferred) // park, don't block
        .build()?;
    let session = Session::new("billing-agent")
        .requested_by("billing-bot")
        .allow("customer", ["cus_7"]);

    let args = json!({
        "customer_id": "cus_7",
        "amount_cents": 4200,
        "reference": "inv-2026-12-approval",
        "reason": "December usage for cus_7"
    });
    let parked = executor.call("create_invoice", args, &session).await;
    println!("create_invoice -> {}", parked.to_json());
    let id = parked
        .approval_id
        .clone()
        .ok_or("a call needing a human is parked with an approval id")?;
    let journal = demo.dir.join("journal.db");
    println!(
        "the upstream received {} request(s)",
        demo.upstream.requests()
    );
    println!("journal: {}", journal.display());
    println!("approval_id: {id}");
    println!("approve it from another terminal:");
    println!(
        "  cargo run -p sallyport-cli -- --journal {} approvals approve {id}",
        journal.display()
    );

    // The host's side: carry out calls approved elsewhere, and poll as the agent would.
    let worker = executor.clone();
    tokio::spawn(async move { worker.run_approval_worker(Duration::from_millis(500)).await });
    let deadline = Instant::now() + Duration::from_secs(wait);
    let result = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let check = executor
            .call("check_approval", json!({ "approval_id": id }), &session)
            .await;
        if check.status != Status::Pending || Instant::now() > deadline {
            break check;
        }
    };
    println!("check_approval -> {}", result.to_json());
    println!(
        "invoices with that reference at the upstream: {}",
        demo.upstream
            .invoices_with_reference("inv-2026-12-approval")
    );
    drop(executor);
    std::fs::remove_dir_all(&demo.dir)?;
    if result.status == Status::Completed {
        Ok(())
    } else {
        Err(format!("the call ended {}", result.status).into())
    }
}

fn wait_seconds() -> Result<u64, Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(600),
        [flag, n] if flag == "--wait" => Ok(n.parse()?),
        _ => Err("usage: approvals [--wait SECONDS]".into()),
    }
}
