use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Restart one unit.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "restart_unit", effect = reversible_change)]
#[ssh(host = "web1", argv = ["systemctl", "restart", "{unit}"], exit(300) = unknown)]
struct RestartUnit {
    unit: String,
}

fn main() {}
