use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Set one build's label.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "set_build_label", effect = reversible_change, idempotent = true)]
#[http(put = "/v1/builds/{build_id}/label", result = ())]
struct SetBuildLabel {
    build_id: String,
    label: String,
}

fn main() {}
