use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Read one deploy key's public half.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_deploy_key", effect = observe, secrets = redact)]
#[channel(name = "demo")]
struct GetDeployKey {
    key_id: String,
}

fn main() {}
