use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Restart one unit.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "restart_unit", effect = reversible_change)]
#[ssh(host = "web1", argv = ["systemctl", "restart", "{unit}"])]
struct RestartUnit {
    #[ssh(argv = ["systemctl"])]
    unit: String,
}

fn main() {}
