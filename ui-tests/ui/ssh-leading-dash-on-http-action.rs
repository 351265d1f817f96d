use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Search the invoices.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "search_invoices", effect = observe)]
#[http(get = "/v1/invoices", query(q), result = ())]
struct SearchInvoices {
    #[ssh(allow_leading_dash)]
    q: String,
}

fn main() {}
