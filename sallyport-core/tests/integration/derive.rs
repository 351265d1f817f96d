//! What `#[derive(Action)]` produces: the exact card, scope values and audit note.
//!
//! This crate depends on `sallyport-core` only, never on `sallyport-macros` directly, as an
//! author's crate does.

use sallyport_core::Action;
use sallyport_core::action::ScopeTag;
use sallyport_core::action::{ConsentRule, DataClass, Externality, RetryRule, ScopedValue};
use sallyport_core::target::{
    ExitRule, HttpMethod, HttpTarget, SshTarget, StatusResult, StatusRule, Target,
};
use sallyport_core::{ActionSpec, EffectClass, Status};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Queue one tested build for the preview environment. It starts within a minute.
///
/// The build must have passed CI; a build that has not is refused upstream.
#[derive(Action, Deserialize, JsonSchema)]
#[action(
    name = "create_preview_deployment",
    effect = external_commitment,
    retry = idempotency_key,
    reconcile = "get_deployment_status",
    credential = "deploy-api",
    data = [pii, financial],
    scope = "One project and one build ID.",
    returns = "Deployment id and its queue status."
)]
#[http(
    post = "/v1/projects/{project_id}/deployments",
    query(dry_run),
    header("X-Request-Note" = note),
    status(202) = pending,
    status(409) = already_in_desired_state,
    result = DeploymentAccepted
)]
#[serde(deny_unknown_fields)]
struct CreatePreviewDeployment {
    #[scope(project)]
    project_id: String,
    build_id: String,
    dry_run: Option<bool>,
    note: Option<String>,
    /// Why the agent wants this.
    #[audit_note]
    reason: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct DeploymentAccepted {
    deployment_id: String,
    operation_status: String,
}

fn create_preview_deployment() -> CreatePreviewDeployment {
    serde_json::from_value(json!({
        "project_id": "proj_1",
        "build_id": "build_7",
        "reason": "ship the fix for the login bug",
    }))
    .expect("valid arguments")
}

#[test]
fn the_card_is_exactly_what_the_attributes_say() {
    let expected = ActionSpec::new("create_preview_deployment", EffectClass::ExternalCommitment)
        .with_description(
            "Queue one tested build for the preview environment. It starts within a minute.\n\
             \n\
             The build must have passed CI; a build that has not is refused upstream.",
        )
        .with_summary("Queue one tested build for the preview environment.")
        .with_retry(RetryRule::IdempotencyKey)
        .with_data_class(DataClass::PII)
        .with_data_class(DataClass::FINANCIAL)
        .with_scope_tag("project_id", "project")
        .with_audit_note_field("reason")
        .with_reconcile("get_deployment_status")
        .with_credential("deploy-api")
        .with_scope_text("One project and one build ID.")
        .with_result_text("Deployment id and its queue status.")
        .with_target(Target::Http(
            HttpTarget::new(HttpMethod::Post, "/v1/projects/{project_id}/deployments")
                .with_query("dry_run")
                .with_header("X-Request-Note", "note")
                .with_status(202, Status::Pending)
                .with_status(409, Status::AlreadyInDesiredState)
                .with_result(sallyport_core::target::ResultShape::of::<DeploymentAccepted>())
                .with_omitted("reason"),
        ));
    assert_eq!(CreatePreviewDeployment::spec(), expected);
}

#[test]
fn the_card_fields_read_back_one_by_one() {
    let spec = CreatePreviewDeployment::spec();
    assert_eq!(spec.name, "create_preview_deployment");
    assert_eq!(
        spec.summary,
        "Queue one tested build for the preview environment."
    );
    assert_eq!(
        spec.description,
        "Queue one tested build for the preview environment. It starts within a minute.\n\n\
         The build must have passed CI; a build that has not is refused upstream."
    );
    assert_eq!(spec.effect, EffectClass::ExternalCommitment);
    assert_eq!(spec.consent, ConsentRule::PerCall);
    assert_eq!(spec.retry, RetryRule::IdempotencyKey);
    assert_eq!(
        spec.data_classes,
        [DataClass::new("pii"), DataClass::new("financial")]
    );
    assert_eq!(spec.externality, Externality::External);
    assert_eq!(
        spec.scope_tags,
        [ScopeTag {
            field: "project_id".into(),
            kind: "project".into()
        }]
    );
    assert_eq!(spec.reconcile.as_deref(), Some("get_deployment_status"));
    assert_eq!(spec.credential.as_deref(), Some("deploy-api"));
    assert_eq!(
        spec.scope_text.as_deref(),
        Some("One project and one build ID.")
    );
    assert_eq!(
        spec.result_text.as_deref(),
        Some("Deployment id and its queue status.")
    );
    assert_eq!(spec.check(), Ok(()));
}

#[test]
fn the_http_target_carries_method_path_query_headers_statuses_and_result_schema() {
    let Target::Http(http) = CreatePreviewDeployment::spec().target else {
        panic!("expected an HTTP target");
    };
    assert_eq!(http.method, HttpMethod::Post);
    assert_eq!(http.path, "/v1/projects/{project_id}/deployments");
    assert_eq!(http.query, ["dry_run"]);
    assert_eq!(http.headers, [("X-Request-Note".into(), "note".into())]);
    assert_eq!(
        http.statuses,
        [
            StatusRule {
                code: 202,
                status: Status::Pending,
                result: StatusResult::Body,
            },
            StatusRule {
                code: 409,
                status: Status::AlreadyInDesiredState,
                result: StatusResult::Body,
            },
        ]
    );
    let result = http.result.expect("a declared result");
    assert_eq!(result.schema["title"], "DeploymentAccepted");
    assert_eq!(
        result.schema["required"],
        json!(["deployment_id", "operation_status"])
    );
    assert_eq!(
        result.project(
            json!({"deployment_id": "dep_1", "operation_status": "queued", "internal": 1})
        ),
        Ok(json!({"deployment_id": "dep_1", "operation_status": "queued"}))
    );
    // A body is decoded straight into the result type, with the same projection.
    assert_eq!(
        result.project_slice(
            br#"{"deployment_id": "dep_1", "operation_status": "queued", "internal": 1}"#
        ),
        Ok(json!({"deployment_id": "dep_1", "operation_status": "queued"}))
    );
    // A field named twice is refused: parsers disagree on which of the two wins.
    let twice = result
        .project_slice(br#"{"deployment_id": "dep_1", "deployment_id": "dep_2", "operation_status": "queued"}"#)
        .expect_err("a repeated field");
    assert!(twice.contains("deployment_id"), "{twice}");
    assert!(result.project_slice(b"not json").is_err());
}

#[test]
fn scope_values_and_audit_note_come_from_the_tagged_fields() {
    let call = create_preview_deployment();
    assert_eq!(
        call.scope_values(),
        [ScopedValue::new("project", "project_id", "proj_1")]
    );
    assert_eq!(
        call.audit_note().as_deref(),
        Some("ship the fix for the login bug")
    );
}

#[test]
fn serde_attributes_still_apply_to_the_struct() {
    let unknown = serde_json::from_value::<CreatePreviewDeployment>(json!({
        "project_id": "proj_1", "build_id": "b", "reason": "r", "extra": 1,
    }));
    assert!(unknown.is_err(), "deny_unknown_fields is kept");
}

/// Read one invoice.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe)]
struct GetInvoice {
    invoice_id: String,
}

/// Rename one preview.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "rename_preview", effect = reversible_change)]
struct RenamePreview {
    preview_id: String,
}

/// Publish one post.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "publish_post", effect = external_commitment)]
struct PublishPost {
    post_id: String,
}

/// Delete one repository.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "delete_repository", effect = irreversible_or_broad)]
struct DeleteRepository {
    repository: String,
}

#[test]
fn consent_retry_and_externality_default_from_the_effect_class() {
    let cases = [
        (
            GetInvoice::spec(),
            ConsentRule::None,
            RetryRule::Safe,
            Externality::Internal,
        ),
        (
            RenamePreview::spec(),
            ConsentRule::Session,
            RetryRule::Never,
            Externality::Internal,
        ),
        (
            PublishPost::spec(),
            ConsentRule::PerCall,
            RetryRule::Never,
            Externality::External,
        ),
        (
            DeleteRepository::spec(),
            ConsentRule::PerCall,
            RetryRule::Never,
            Externality::Internal,
        ),
    ];
    for (spec, consent, retry, externality) in cases {
        assert_eq!(
            (spec.consent, spec.retry, spec.externality),
            (consent, retry, externality),
            "{}",
            spec.name
        );
        assert_eq!(spec.target, Target::None, "{}", spec.name);
        assert_eq!(spec.data_classes, [], "{}", spec.name);
        assert_eq!(spec.reconcile, None, "{}", spec.name);
        assert_eq!(spec.credential, None, "{}", spec.name);
        assert_eq!(spec.check(), Ok(()), "{}", spec.name);
    }
}

#[test]
fn an_action_without_tagged_fields_has_no_scope_values_and_no_audit_note() {
    let call: GetInvoice = serde_json::from_value(json!({"invoice_id": "inv_1"})).expect("valid");
    assert_eq!(call.invoice_id, "inv_1");
    assert_eq!(call.scope_values(), []);
    assert_eq!(call.audit_note(), None);
    assert_eq!(GetInvoice::spec().scope_tags, []);
}

/// Read one customer record, which holds personal data.
#[derive(Action, Deserialize, JsonSchema)]
#[action(
    name = "read_customer",
    effect = observe,
    consent = per_call,
    retry = never,
    externality = external,
    data = [pii],
    summary = "Reads a customer."
)]
struct ReadCustomer {
    customer_id: u64,
}

#[test]
fn an_author_may_tighten_consent_and_override_the_summary() {
    let spec = ReadCustomer::spec();
    assert_eq!(spec.consent, ConsentRule::PerCall);
    assert_eq!(spec.retry, RetryRule::Never);
    assert_eq!(spec.externality, Externality::External);
    assert_eq!(spec.summary, "Reads a customer.");
    assert_eq!(
        spec.description,
        "Read one customer record, which holds personal data."
    );
    let call: ReadCustomer = serde_json::from_value(json!({"customer_id": 7})).expect("valid");
    assert_eq!(call.customer_id, 7);
}

/// Add labels to issues in one repository of a workspace, given by
/// the numbers of the issues. Labels that are present stay.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "label_issues", effect = reversible_change, consent = per_call)]
#[http(patch = "/v1/{workspaceSlug}/{repo-name}/issues", query(dryRun), result = ())]
#[serde(rename_all = "camelCase")]
struct LabelIssues {
    #[scope(workspace)]
    workspace_slug: String,
    #[scope(repository)]
    #[serde(rename = "repo-name")]
    repo_name: String,
    #[scope(issue)]
    issue_numbers: Vec<u32>,
    #[scope(team)]
    team: Option<String>,
    labels: Vec<String>,
    dry_run: bool,
    #[audit_note]
    why: Option<String>,
}

#[test]
fn renamed_fields_are_tagged_and_reported_by_their_json_names() {
    let spec = LabelIssues::spec();
    let tags: Vec<(&str, &str)> = spec
        .scope_tags
        .iter()
        .map(|tag| (&*tag.field, &*tag.kind))
        .collect();
    assert_eq!(
        tags,
        [
            ("workspaceSlug", "workspace"),
            ("repo-name", "repository"),
            ("issueNumbers", "issue"),
            ("team", "team"),
        ]
    );
    let Target::Http(http) = spec.target else {
        panic!("expected an HTTP target");
    };
    assert_eq!(http.method, HttpMethod::Patch);
    assert_eq!(http.query, ["dryRun"]);
    // `result = ()`: no data, and no result shape in the definition.
    assert!(http.result.is_none());
    // The audit note is omitted by its JSON name.
    assert_eq!(http.omit, ["why"]);
    assert_eq!(
        spec.summary,
        "Add labels to issues in one repository of a workspace, given by the numbers of the issues."
    );
}

#[test]
fn scope_values_flatten_options_and_vectors_in_field_order() {
    let call: LabelIssues = serde_json::from_value(json!({
        "workspaceSlug": "acme",
        "repo-name": "web",
        "issueNumbers": [12, 31],
        "team": "infra",
        "labels": ["bug"],
        "dryRun": false,
    }))
    .expect("valid");
    assert_eq!(
        call.scope_values(),
        [
            ScopedValue::new("workspace", "workspaceSlug", "acme"),
            ScopedValue::new("repository", "repo-name", "web"),
            ScopedValue::new("issue", "issueNumbers", "12"),
            ScopedValue::new("issue", "issueNumbers", "31"),
            ScopedValue::new("team", "team", "infra"),
        ]
    );
    assert_eq!(call.audit_note(), None);

    let without_team: LabelIssues = serde_json::from_value(json!({
        "workspaceSlug": "acme",
        "repo-name": "web",
        "issueNumbers": [],
        "labels": [],
        "dryRun": true,
        "why": "triage",
    }))
    .expect("valid");
    assert_eq!(
        without_team.scope_values(),
        [
            ScopedValue::new("workspace", "workspaceSlug", "acme"),
            ScopedValue::new("repository", "repo-name", "web"),
        ]
    );
    assert_eq!(without_team.audit_note().as_deref(), Some("triage"));
    assert!(!without_team.labels.iter().any(String::is_empty));
    assert!(without_team.dry_run);
}

/// Restart one systemd unit on an inventory host.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "restart_unit", effect = reversible_change, credential = "ops-ssh")]
#[ssh(
    host = "{host}",
    argv = ["systemctl", "restart", "{unit}"],
    exit(3) = already_in_desired_state,
    exit(5) = rejected
)]
struct RestartUnit {
    #[scope(host)]
    host: String,
    unit: String,
}

#[test]
fn the_ssh_target_carries_host_argv_and_exit_mappings() {
    let spec = RestartUnit::spec();
    assert_eq!(
        spec.target,
        Target::Ssh(
            SshTarget::new("{host}", ["systemctl", "restart", "{unit}"])
                .with_exit(3, Status::AlreadyInDesiredState)
                .with_exit(5, Status::Rejected)
        )
    );
    let Target::Ssh(ssh) = spec.target else {
        panic!("expected an SSH target");
    };
    assert_eq!(ssh.host, "{host}");
    assert_eq!(ssh.argv, ["systemctl", "restart", "{unit}"]);
    assert_eq!(
        ssh.exits,
        [
            ExitRule {
                code: 3,
                status: Status::AlreadyInDesiredState
            },
            ExitRule {
                code: 5,
                status: Status::Rejected
            },
        ]
    );
    assert_eq!(spec.credential.as_deref(), Some("ops-ssh"));
    let call: RestartUnit =
        serde_json::from_value(json!({"host": "web1", "unit": "nginx"})).expect("valid");
    assert_eq!(call.unit, "nginx");
    assert_eq!(
        call.scope_values(),
        [ScopedValue::new("host", "host", "web1")]
    );
}

/// Reload the proxy on the fixed edge host.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "reload_edge_proxy", effect = reversible_change)]
#[ssh(host = "edge1", argv = ["systemctl", "reload", "haproxy"])]
struct ReloadEdgeProxy {}

#[test]
fn a_fixed_ssh_host_and_an_action_without_inputs_are_allowed() {
    assert_eq!(
        ReloadEdgeProxy::spec().target,
        Target::Ssh(SshTarget::new("edge1", ["systemctl", "reload", "haproxy"]))
    );
    let call: ReloadEdgeProxy = serde_json::from_value(json!({})).expect("an empty object");
    assert_eq!(call.scope_values(), []);
}

/// Record one test event.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "record_event", effect = reversible_change)]
#[channel(name = "test")]
struct RecordEvent {
    r#type: String,
}

#[test]
fn a_custom_channel_is_named_with_an_empty_definition() {
    let spec = RecordEvent::spec();
    assert_eq!(spec.target, Target::custom("test", json!({})));
    assert_eq!(spec.target.channel_name(), Some("test"));
    let call: RecordEvent = serde_json::from_value(json!({"type": "ping"})).expect("valid");
    assert_eq!(call.r#type, "ping");
}

fn assert_action<A: Action>() -> ActionSpec {
    A::spec()
}

#[test]
fn derived_types_are_actions_for_generic_code() {
    let names: Vec<String> = [
        assert_action::<CreatePreviewDeployment>(),
        assert_action::<GetInvoice>(),
        assert_action::<LabelIssues>(),
        assert_action::<RestartUnit>(),
        assert_action::<RecordEvent>(),
    ]
    .into_iter()
    .map(|spec| spec.name.into_owned())
    .collect();
    assert_eq!(
        names,
        [
            "create_preview_deployment",
            "get_invoice",
            "label_issues",
            "restart_unit",
            "record_event"
        ]
    );
}

// ---------------------------------------------------------------- NAME, Output and limits

/// Read one report, with every per-action limit set.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_report", effect = observe)]
#[http(
    get = "/v1/reports/{report_id}",
    result = DeploymentAccepted,
    timeout = "2500ms",
    connect_timeout = "1s",
    max_attempts = 5,
    max_retry_after = "2m",
    max_response_bytes = 65_536,
    message_field = "/error/message"
)]
struct GetReport {
    report_id: String,
}

#[test]
fn every_http_limit_attribute_reaches_the_card() {
    let Target::Http(http) = GetReport::spec().target else {
        panic!("expected an HTTP target");
    };
    assert_eq!(http.total_timeout_ms, Some(2_500));
    assert_eq!(http.connect_timeout_ms, Some(1_000));
    assert_eq!(http.max_attempts, Some(5));
    assert_eq!(http.max_retry_after_s, Some(120));
    assert_eq!(http.max_response_bytes, Some(65_536));
    assert_eq!(http.message_field.as_deref(), Some("/error/message"));
    // The same card as the builder calls write, so the definition hash is the same.
    let expected = HttpTarget::new(HttpMethod::Get, "/v1/reports/{report_id}")
        .with_result(sallyport_core::target::ResultShape::of::<DeploymentAccepted>())
        .with_message_field("/error/message")
        .with_connect_timeout(std::time::Duration::from_secs(1))
        .with_total_timeout(std::time::Duration::from_millis(2_500))
        .with_max_response_bytes(65_536)
        .with_max_retry_after(std::time::Duration::from_secs(120))
        .with_max_attempts(5);
    assert_eq!(http, expected);
}

/// Tail one log file on a fixed host, within limits.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "tail_log", effect = observe)]
#[ssh(host = "web1", argv = ["tail", "-n", "20", "{file}"], timeout = "1500ms", output_cap = 4096)]
struct TailLog {
    file: String,
}

#[test]
fn the_ssh_timeout_and_output_cap_reach_the_card() {
    assert_eq!(
        TailLog::spec().target,
        Target::Ssh(
            SshTarget::new("web1", ["tail", "-n", "20", "{file}"])
                .with_timeout(std::time::Duration::from_millis(1500))
                .with_output_cap(4096)
        )
    );
}

#[test]
fn name_is_a_constant_equal_to_the_cards_name() {
    assert_eq!(CreatePreviewDeployment::NAME, "create_preview_deployment");
    assert_eq!(GetReport::NAME, GetReport::spec().name);
    assert_eq!(RestartUnit::NAME, RestartUnit::spec().name);
    assert_eq!(RecordEvent::NAME, "record_event");
    // Usable where a constant is required.
    const NAME: &str = TailLog::NAME;
    assert_eq!(NAME, "tail_log");
}

fn output_of<A: Action>() -> &'static str {
    std::any::type_name::<A::Output>()
}

#[test]
fn output_is_the_declared_result_type_unit_command_output_or_json() {
    assert!(output_of::<CreatePreviewDeployment>().ends_with("::DeploymentAccepted"));
    assert_eq!(output_of::<LabelIssues>(), "()");
    assert_eq!(
        output_of::<RestartUnit>(),
        std::any::type_name::<sallyport_core::target::CommandOutput>()
    );
    assert_eq!(output_of::<RecordEvent>(), "serde_json::value::Value");
}
