use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Read one report.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_report", effect = observe)]
#[http(get = "/v1/reports/{report_id}", result = (), max_attempts = 9)]
struct GetReport {
    report_id: String,
}

fn main() {}
