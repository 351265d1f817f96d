use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Queue one build for the preview environment.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "create_preview", effect = reversible_change)]
#[http(post = "/v1/previews", query(reason), result = ())]
struct CreatePreview {
    build_id: String,
    /// Why the agent wants this.
    #[audit_note]
    reason: String,
}

fn main() {}
