use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Send one invoice to its customer.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "send-invoice", effect = external_commitment, consent = none, data = [pii, pii])]
#[http(post = "/v1/invoices/{invoce_id}/send", status(202) = queued, result = ())]
struct SendInvoice {
    invoice_id: String,
}

// The derive's stub impl keeps this use site quiet while the attributes are wrong.
fn card<A: Action>() -> sallyport_core::ActionSpec {
    A::spec()
}

fn use_it() {
    let _ = card::<SendInvoice>();
}

fn main() {
    use_it();
}
