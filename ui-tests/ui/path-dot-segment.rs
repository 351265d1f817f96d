use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Read one project's settings.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_settings", effect = observe, credential = "projects-api")]
#[http(get = "/v1/projects/{project_id}/../admin/settings", result = ())]
struct GetSettings {
    project_id: String,
}

fn main() {}
