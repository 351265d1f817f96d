use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Read one record.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_record", effect = observe)]
struct GetRecord<Id> {
    id: Id,
}

fn main() {}
