//! Loads `examples/policies/invoices.cedar` against a small invoices catalog, prints the
//! Cedar schema the policies were validated against, and shows what the policies decide for
//! a few calls: `cargo run -p sallyport-cedar --example invoices`.
//!
//! The executor asks the same `decide` at stage 4 of every call (see
//! `sallyport-cedar/tests/integration/policy_cedar.rs` for the whole pipeline against a real
//! upstream).

use std::path::Path;

use sallyport_cedar::CedarPolicy;
use sallyport_core::action::ScopedValue;
use sallyport_core::policy::{CallCounts, Policy, PolicyRequest, visible_arguments};
use sallyport_core::{Action, ActionSpec, Catalog, Session};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Create one invoice for a customer.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "create_invoice", effect = reversible_change, consent = none, data = [financial])]
#[channel(name = "billing")]
#[allow(dead_code, reason = "the example decides calls without decoding them")]
struct CreateInvoice {
    #[scope(customer)]
    customer_id: String,
    #[policy]
    amount_cents: u64,
    #[policy]
    currency: String,
}

/// Read one invoice.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe)]
#[channel(name = "billing")]
#[allow(dead_code, reason = "the example decides calls without decoding them")]
struct GetInvoice {
    invoice_id: String,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let catalog = Catalog::builder()
        .action::<CreateInvoice>()
        .action::<GetInvoice>()
        .build()?;
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies/invoices.cedar");
    let policy = CedarPolicy::from_file(&catalog, &file)?;
    println!("Cedar schema of the catalog:\n{}", policy.schema_text());

    let spec: ActionSpec = CreateInvoice::spec();
    let billing = Session::new("chat-1").with_attribute("team", "billing");
    let sales = Session::new("chat-2").with_attribute("team", "sales");
    let customer = [ScopedValue::new("customer", "customer_id", "cus_7")];
    let cases = [
        ("billing, 50.00", &billing, 5_000, CallCounts::default()),
        (
            "billing, 2,500.00",
            &billing,
            250_000,
            CallCounts::default(),
        ),
        (
            "billing, 6th this hour",
            &billing,
            5_000,
            CallCounts::new(1, 5, 5),
        ),
        ("sales, 50.00", &sales, 5_000, CallCounts::default()),
    ];
    for (label, session, amount, calls) in cases {
        let arguments = json!({"customer_id": "cus_7", "amount_cents": amount, "currency": "EUR"});
        let visible = visible_arguments(&spec, &arguments);
        let request = PolicyRequest::new(session, &spec, &customer, &visible, calls);
        let decision = policy.decide(&request);
        println!(
            "{label:>24}: {} {}",
            decision.verdict,
            decision.reason.as_deref().unwrap_or("")
        );
    }
    Ok(())
}
