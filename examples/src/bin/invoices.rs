//! Idempotent invoices: a timeout after the server committed → `unknown` → reconcile.
//!
//! ```text
//! cargo run --bin invoices
//! ```
//!
//! `create_invoice` declares `retry = idempotency_key`: the executor generates one key per
//! attempt, and the HTTP channel resends a timed-out request with the same key and the same
//! bytes, a bounded number of times. When every answer is lost, the agent is told `unknown`,
//! not to retry, and which read-only action tells the truth. Here the upstream commits the
//! invoice and then never answers.

use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::Journal;
use sallyport_core::outcome::Status;
use sallyport_core::{Executor, Session};
use sallyport_examples::catalog::demo_catalog;
use sallyport_examples::setup::Demo;
use sallyport_http::HttpChannel;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let demo = Demo::start("invoices").await?;
    let executor = Executor::builder(demo_catalog()?)
        .journal_arc(demo.journal.clone())
        .vault(demo.vault)
        .channel(HttpChannel::builder().build()?)
        // A real host asks a human; this example prints the request and approves it.
        .consent(FnConsent::new(|request| async move {
            println!("consent requested:\n{}", request.render());
            ConsentDecision::Approve
        }))
        .build()?;
    let session = Session::new("billing-agent").allow("customer", ["cus_7"]);

    let args = json!({
        "customer_id": "cus_7",
        "amount_cents": 4200,
        "reference": "slow-inv-2026-11",
        "reason": "November usage for cus_7"
    });
    let before = demo.upstream.requests();
    let result = executor.call("create_invoice", args, &session).await;
    println!("create_invoice -> {}", result.to_json());
    println!(
        "the upstream received {} request(s), all with one Idempotency-Key",
        demo.upstream.requests() - before
    );
    assert_eq!(result.status, Status::Unknown);

    let next = result
        .next
        .ok_or("an unknown result names its reconcile action")?;
    let check = executor.call(&next.action, next.arguments, &session).await;
    println!("{} -> {}", next.action, check.to_json());
    let count = check.data.as_ref().and_then(|d| d["count"].as_u64());
    println!(
        "invoices with that reference: {} (the server holds {})",
        count.unwrap_or_default(),
        demo.upstream.invoices_with_reference("slow-inv-2026-11")
    );
    assert_eq!(count, Some(1));
    let report = demo.journal.verify().await?;
    println!(
        "audit chain: {} records, intact: {}",
        report.records,
        report.is_intact()
    );
    Ok(())
}
