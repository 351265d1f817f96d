use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Read one customer.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "read_customer", effect = observe, personal_data = [email, address, mail])]
struct ReadCustomer {
    customer_id: String,
}

fn main() {}
