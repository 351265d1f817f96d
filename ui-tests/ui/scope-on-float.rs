use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Read one reading.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_reading", effect = observe)]
struct GetReading {
    #[scope(sensor)]
    sensor: Option<f64>,
}

fn main() {}
