use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Create one deployment.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "Create-Deployment", effect = reversible_change)]
struct CreateDeployment {
    build_id: String,
}

fn main() {}
