use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Run one maintenance tool.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "run_tool", effect = irreversible_or_broad)]
#[ssh(host = "web1", argv = ["{tool}", "--yes"])]
struct RunTool {
    tool: String,
}

fn main() {}
