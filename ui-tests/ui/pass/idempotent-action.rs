//! `idempotent` on a setting action compiles, and the spec says the action is naturally
//! idempotent.
#![deny(warnings)]

use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Set one build's label; setting the same label again changes nothing.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "set_build_label", effect = reversible_change, idempotent)]
#[http(put = "/v1/builds/{build_id}/label", result = ())]
struct SetBuildLabel {
    build_id: String,
    label: String,
}

fn main() {
    let spec = SetBuildLabel::spec();
    assert!(spec.naturally_idempotent);
    assert!(spec.is_idempotent());
}
