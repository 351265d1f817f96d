use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Restart one unit on an inventory host.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "restart_unit", effect = reversible_change)]
#[ssh(host = "{server}", argv = ["systemctl", "restart", "{unit}"])]
struct RestartUnit {
    server: String,
    unit: String,
}

fn main() {}
