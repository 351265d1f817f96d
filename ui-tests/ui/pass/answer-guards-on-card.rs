//! `secrets` and `instructions` on `#[action]`: the modes reach the spec and the card, and
//! they are part of the definition (loosening one changes its hash).
#![deny(warnings)]

use sallyport_core::Action;
use sallyport_core::action::{InstructionMode, SecretMode};
use schemars::JsonSchema;
use serde::Deserialize;

/// Read one deploy key, private half included: its purpose is to return it.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "export_deploy_key", effect = observe, secrets = allow, instructions = strip)]
#[channel(name = "demo")]
struct ExportDeployKey {
    key_id: String,
}

/// Read one deploy key, private half included: its purpose is to return it.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "export_deploy_key", effect = observe)]
#[channel(name = "demo")]
struct ExportDeployKeyMasked {
    key_id: String,
}

fn hash<A: Action>() -> String {
    let catalog = sallyport_core::Catalog::builder()
        .action::<A>()
        .build()
        .expect("a valid catalog");
    let entry = catalog.get("export_deploy_key").expect("the action");
    entry.definition_hash().to_owned()
}

fn main() {
    let spec = ExportDeployKey::spec();
    assert_eq!(spec.secrets, SecretMode::Allow);
    assert_eq!(spec.instructions, InstructionMode::Strip);
    let card = spec.card();
    assert!(
        card.contains("Secrets: allowed (reviewed opt-out)"),
        "{card}"
    );
    assert!(
        card.contains("Instructions: invisible characters are removed"),
        "{card}"
    );
    let plain = ExportDeployKeyMasked::spec();
    assert_eq!(plain.secrets, SecretMode::Mask);
    assert!(!plain.card().contains("Secrets:"));
    assert_ne!(hash::<ExportDeployKey>(), hash::<ExportDeployKeyMasked>());
}
