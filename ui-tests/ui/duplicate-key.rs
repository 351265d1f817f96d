use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Read one invoice.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe, name = "read_invoice")]
struct GetInvoice {
    invoice_id: String,
}

fn main() {}
