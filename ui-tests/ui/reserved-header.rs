use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Read one invoice.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe)]
#[http(get = "/v1/invoices/{invoice_id}", header("Authorization" = token), result = ())]
struct GetInvoice {
    invoice_id: String,
    token: String,
}

fn main() {}
