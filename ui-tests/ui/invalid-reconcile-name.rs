use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Create one deployment.
#[derive(Action, Deserialize, JsonSchema)]
#[action(
    name = "create_deployment",
    effect = reversible_change,
    reconcile = "get__deployment"
)]
struct CreateDeployment {
    build_id: String,
}

fn main() {}
