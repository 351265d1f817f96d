use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Change one deployment.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "change_deployment", effect = reversible_change)]
enum ChangeDeployment {
    Pause { deployment_id: String },
    Resume { deployment_id: String },
}

fn main() {}
