use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Delete one preview environment.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "delete_preview", effect = irreversible_or_broad)]
#[http(delete = "/v1/previews/{preview_id}", status(404) = completed, result = ())]
struct DeletePreview {
    preview_id: String,
}

fn main() {}
