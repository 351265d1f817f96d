use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Create one deployment of a build.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "create_deployment", effect = reversible_change)]
#[http(post = "/v1/deployments", status(202) = accepted, result = ())]
struct CreateDeployment {
    build_id: String,
}

fn main() {}
