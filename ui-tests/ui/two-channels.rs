use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Restart one unit.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "restart_unit", effect = reversible_change)]
#[http(post = "/v1/units/{unit}/restart", result = ())]
#[ssh(host = "web1", argv = ["systemctl", "restart", "{unit}"])]
struct RestartUnit {
    unit: String,
}

fn main() {}
