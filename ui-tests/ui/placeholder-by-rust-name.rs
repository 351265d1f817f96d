use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Create one deployment of a build.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "create_deployment", effect = reversible_change)]
#[http(post = "/v1/projects/{project_id}/deployments", result = ())]
#[serde(rename_all = "camelCase")]
struct CreateDeployment {
    project_id: String,
    build_id: String,
}

fn main() {}
