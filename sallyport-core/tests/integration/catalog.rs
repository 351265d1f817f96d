//! The catalog's tool exports: plain JSON Schema, MCP (with annotations), OpenAI, Anthropic.

use sallyport_core::{Action, Catalog};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// List the builds of one project.
///
/// Returns at most 50 builds, newest first.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "list_builds", effect = observe, data = [internal])]
#[channel(name = "test")]
struct ListBuilds {
    /// The project.
    #[scope(project)]
    project_id: String,
}

/// Send one invoice to its customer.
#[derive(Action, Deserialize, JsonSchema)]
#[action(
    name = "send_invoice",
    effect = external_commitment,
    retry = idempotency_key,
    reconcile = "list_builds"
)]
#[channel(name = "test")]
struct SendInvoice {
    invoice_id: String,
}

/// Delete one project and everything in it.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "delete_project", effect = irreversible_or_broad)]
#[channel(name = "test")]
struct DeleteProject {
    #[scope(project)]
    project_id: String,
}

/// Rename one branch.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "rename_branch", effect = reversible_change)]
#[channel(name = "test")]
struct RenameBranch {
    branch: String,
    new_name: String,
}

/// Set one build's label; setting the same label again changes nothing.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "set_build_label", effect = reversible_change, idempotent)]
#[channel(name = "test")]
struct SetBuildLabel {
    build_id: String,
    label: String,
}

/// Read one report.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_report", effect = observe, credential = "reports-api")]
#[http(get = "/v1/reports/{report_id}", result = ())]
struct GetReport {
    report_id: String,
}

fn catalog() -> Catalog {
    Catalog::builder()
        .action::<ListBuilds>()
        .action::<SendInvoice>()
        .action::<DeleteProject>()
        .action::<RenameBranch>()
        .build()
        .expect("catalog")
}

#[test]
fn mcp_annotations_follow_the_card() {
    let tools = catalog().mcp_tools();
    let by_name = |name: &str| {
        tools
            .as_array()
            .expect("array")
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .expect("tool")
    };
    assert_eq!(
        by_name("list_builds")["annotations"],
        json!({"title": "List builds", "readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false})
    );
    assert_eq!(
        by_name("send_invoice")["annotations"],
        json!({"title": "Send invoice", "readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": true})
    );
    assert_eq!(
        by_name("delete_project")["annotations"],
        json!({"title": "Delete project", "readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": false})
    );
    assert_eq!(
        by_name("rename_branch")["annotations"],
        json!({"title": "Rename branch", "readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false})
    );
    let list = by_name("list_builds");
    assert_eq!(list["inputSchema"]["additionalProperties"], false);
    assert_eq!(list["inputSchema"]["required"], json!(["project_id"]));
    assert_eq!(
        list["inputSchema"]["properties"]["project_id"]["type"],
        "string"
    );
    assert!(list["inputSchema"].get("$schema").is_none());
    let send = by_name("send_invoice");
    let description = send["description"].as_str().expect("description");
    assert!(
        description.starts_with("Send one invoice to its customer."),
        "{description}"
    );
    assert!(
        description.contains("A human approves every call."),
        "{description}"
    );
    assert!(
        description.contains("check with list_builds. Never retry an unknown result."),
        "{description}"
    );
}

#[test]
fn openai_and_anthropic_exports_carry_the_same_schema() {
    let catalog = catalog();
    let openai = catalog.openai_tools();
    let anthropic = catalog.anthropic_tools();
    let plain = catalog.json_schema_tools();
    assert_eq!(openai.as_array().expect("array").len(), 4);
    for i in 0..4 {
        assert_eq!(openai[i]["type"], "function");
        assert_eq!(openai[i]["function"]["name"], anthropic[i]["name"]);
        assert_eq!(
            openai[i]["function"]["parameters"],
            anthropic[i]["input_schema"]
        );
        assert_eq!(plain[i]["input_schema"], anthropic[i]["input_schema"]);
        assert_eq!(
            openai[i]["function"]["description"],
            anthropic[i]["description"]
        );
        assert_eq!(anthropic[i]["input_schema"]["additionalProperties"], false);
    }
}

#[test]
fn the_card_renders_in_the_documented_form() {
    let card = ListBuilds::spec().card();
    assert_eq!(
        card,
        "Action: list_builds\n\
         Effect: List the builds of one project.\n\
         Class: observe (internal)\n\
         Scope: One project (`project_id`).\n\
         Result: The upstream's answer, projected to declared fields.\n\
         Human consent: Not required.\n\
         Retry: Safe to retry: the action only reads.\n\
         Data: internal\n"
    );
}

#[test]
fn the_definition_hash_changes_with_meaning_and_only_with_meaning() {
    let a = catalog();
    let b = catalog();
    let hash = |c: &Catalog, n: &str| c.get(n).expect("entry").definition_hash().to_owned();
    assert_eq!(hash(&a, "list_builds"), hash(&b, "list_builds"));
    let widened = Catalog::builder()
        .action_with_spec::<ListBuilds>(|s| {
            s.with_consent(sallyport_core::action::ConsentRule::Session)
        })
        .build()
        .expect("catalog");
    assert_ne!(hash(&a, "list_builds"), hash(&widened, "list_builds"));
    assert_eq!(hash(&a, "list_builds").len(), 64);
}

/// What each export says about repeating a call: `observe` and declared-idempotent actions
/// are idempotent; an idempotency-key action is not (its key is per attempt: two identical
/// calls are two invoices).
#[test]
fn idempotent_hint_is_true_only_for_observe_and_declared_idempotent_actions() {
    let catalog = Catalog::builder()
        .action::<ListBuilds>()
        .action::<SendInvoice>()
        .action::<SetBuildLabel>()
        .build()
        .expect("catalog");
    let hint = |name: &str| {
        catalog
            .mcp_tools()
            .as_array()
            .expect("array")
            .iter()
            .find(|t| t["name"] == name)
            .expect("tool")["annotations"]["idempotentHint"]
            .clone()
    };
    assert_eq!(hint("list_builds"), json!(true));
    assert_eq!(hint("send_invoice"), json!(false));
    assert_eq!(hint("set_build_label"), json!(true));
    let line = "Idempotent: calling again with the same arguments changes nothing more.";
    for export in [catalog.openai_tools(), catalog.anthropic_tools()] {
        for tool in export.as_array().expect("array") {
            let tool = tool.get("function").unwrap_or(tool);
            let description = tool["description"].as_str().expect("description");
            let declared = tool["name"] == "set_build_label";
            assert_eq!(description.contains(line), declared, "{description}");
        }
    }
    let label = catalog.get("set_build_label").expect("entry");
    assert!(label.spec().naturally_idempotent);
    assert!(
        label.spec().card().contains(
            "Idempotent: repeating a call with the same arguments changes nothing more.\n"
        )
    );
    assert_eq!(label.definition()["naturally_idempotent"], true);
    // An action without the declaration keeps the definition (and approved hash) it had.
    let send = catalog.get("send_invoice").expect("entry");
    assert!(send.definition().get("naturally_idempotent").is_none());
    assert!(!send.spec().card().contains("Idempotent:"));
}

#[test]
fn a_path_template_with_a_dot_segment_is_refused_when_the_catalog_is_built() {
    for path in [
        "/v1/reports/../admin/{report_id}",
        "/v1/reports/%2e%2E/admin/{report_id}",
        "/v1/reports/.%2e/{report_id}",
        "/v1/reports/%252e%252e/{report_id}",
        "/v1/reports/./{report_id}",
        "/v1\\reports\\{report_id}",
    ] {
        let built = Catalog::builder()
            .action_with_spec::<GetReport>(|mut spec| {
                if let sallyport_core::target::Target::Http(t) = &mut spec.target {
                    t.path = path.into();
                }
                spec
            })
            .build();
        match built {
            Err(sallyport_core::catalog::CatalogError::InvalidSpec {
                name,
                source: sallyport_core::action::SpecError::InvalidHttpPath { path: p, .. },
            }) => {
                assert_eq!(name, "get_report");
                assert_eq!(p, path);
            }
            other => panic!("{path}: expected InvalidHttpPath, got {other:?}"),
        }
    }
    assert!(Catalog::builder().action::<GetReport>().build().is_ok());
}

/// Cancel one invoice; an uncertain cancel is checked with `rename_branch`, which is not a read.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "cancel_invoice", effect = reversible_change, reconcile = "rename_branch")]
#[channel(name = "test")]
struct CancelInvoice {
    invoice_id: String,
}

#[test]
fn a_reconcile_action_that_changes_state_is_refused_when_the_catalog_is_built() {
    let error = Catalog::builder()
        .action::<RenameBranch>()
        .action::<CancelInvoice>()
        .build()
        .expect_err("a reconcile action must only read");
    match &error {
        sallyport_core::catalog::CatalogError::ReconcileNotObserve { action, reconcile } => {
            assert_eq!(action, "cancel_invoice");
            assert_eq!(reconcile, "rename_branch");
        }
        other => panic!("expected ReconcileNotObserve, got {other:?}"),
    }
    assert_eq!(
        error.to_string(),
        "reconcile action `rename_branch` of `cancel_invoice` must be an observe action"
    );
    // The same action with a read-only reconcile target builds: the refusal is about the
    // reconcile action's effect, not about reconcile itself.
    let catalog = Catalog::builder()
        .action::<ListBuilds>()
        .action::<SendInvoice>()
        .build()
        .expect("a read-only reconcile action is accepted");
    assert_eq!(catalog.len(), 2);
}
