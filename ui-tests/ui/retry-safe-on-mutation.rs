use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Rename one preview environment.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "rename_preview", effect = reversible_change, retry = safe)]
struct RenamePreview {
    preview_id: String,
    name: String,
}

fn main() {}
