use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Read one invoice.
#[derive(Action, Deserialize, JsonSchema)]
#[action(effect = observe)]
struct GetInvoice {
    invoice_id: String,
}

fn main() {}
