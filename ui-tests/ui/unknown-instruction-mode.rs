use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Read one support ticket.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_ticket", effect = observe, instructions = ignore)]
#[channel(name = "demo")]
struct GetTicket {
    ticket_id: String,
}

fn main() {}
