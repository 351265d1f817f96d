//! A derived action compiles without a single warning: fields the agent sends are read
//! through the JSON arguments, so none of them is reported as dead code.
#![deny(warnings, missing_docs, unused_qualifications)]

use sallyport_core::Action;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Queue one tested build for the preview environment.
#[derive(Action, Deserialize, JsonSchema)]
#[action(
    name = "create_preview_deployment",
    effect = external_commitment,
    retry = idempotency_key,
    reconcile = "get_deployment_status",
    credential = "deploy-api",
    data = [pii],
    externality = external,
    scope = "One project and one build ID.",
    returns = "Deployment id and its queue status.",
    summary = "Queue one build."
)]
#[http(
    post = "/v1/projects/{project_id}/deployments",
    query(dry_run),
    header("X-Request-Note" = note),
    status(202) = pending,
    result = DeploymentAccepted
)]
#[serde(deny_unknown_fields)]
struct CreatePreviewDeployment {
    #[scope(project)]
    project_id: String,
    build_id: String,
    dry_run: Option<bool>,
    note: Option<String>,
    #[audit_note]
    reason: String,
}

/// The accepted deployment.
#[derive(Deserialize, Serialize, JsonSchema)]
struct DeploymentAccepted {
    deployment_id: String,
}

/// Restart one unit.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "restart_unit", effect = reversible_change)]
#[ssh(host = "{host}", argv = ["systemctl", "restart", "{unit}"], exit(3) = already_in_desired_state)]
struct RestartUnit {
    #[scope(host)]
    host: String,
    unit: String,
}

/// Search the system log for one pattern, which may be an option such as `-e`.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "grep_syslog", effect = observe)]
#[ssh(host = "web1", argv = ["grep", "{pattern}", "/var/log/syslog"])]
struct GrepSyslog {
    #[ssh(allow_leading_dash)]
    pattern: String,
}

/// List the hosts.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "list_hosts", effect = observe)]
#[channel(name = "test")]
struct ListHosts {}

fn main() {
    assert_eq!(
        CreatePreviewDeployment::spec().name,
        "create_preview_deployment"
    );
    assert_eq!(RestartUnit::spec().name, "restart_unit");
    let sallyport_core::target::Target::Ssh(grep) = GrepSyslog::spec().target else {
        panic!("an ssh target")
    };
    assert!(grep.leading_dash_allowed("pattern"));
    assert_eq!(ListHosts::spec().name, "list_hosts");
    assert_eq!(ListHosts::NAME, "list_hosts");
    assert_eq!(RestartUnit::NAME, RestartUnit::spec().name);
}
