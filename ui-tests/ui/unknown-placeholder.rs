use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Create one deployment of a build.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "create_deployment", effect = reversible_change)]
#[http(post = "/v1/projects/{projct_id}/deployments", result = ())]
struct CreateDeployment {
    project_id: String,
    build_id: String,
}

fn main() {}
