use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Send one invoice to its customer.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "send_invoice", effect = external_commitment, consent = session)]
struct SendInvoice {
    invoice_id: String,
}

fn main() {}
