//! Definition drift end to end: every reason code and status/disposition mapping compared as
//! exact Drift Decision Objects, stage-5 enforcement through the executor (a scripted channel
//! that counts dispatches, a real SQLite journal file), baseline replacement, session grants
//! bound to the definition, and the lockfile round trip.

use std::sync::Arc;
use std::time::Duration;

use sallyport_core::action::ActionSpec;
use sallyport_core::action::{ConsentRule, DataClass, Externality, RetryRule};
use sallyport_core::catalog::Provenance;
use sallyport_core::code::{Code, RefusalCode};
use sallyport_core::consent::SessionGrants;
use sallyport_core::drift::{
    Baseline, BaselineGuard, CoreDisposition, DriftDecision, DriftStatus, ReasonCode,
    RecommendedAction, Severity,
};
use sallyport_core::journal::{Journal, Phase, SqliteJournal};
use sallyport_core::outcome::{Origin, Status};
use sallyport_core::target::Target;
use sallyport_core::{Action, Catalog, EffectClass, Executor, Session};
use sallyport_tests::scripted::ScriptedChannel;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Read one build of a project.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_build", effect = observe)]
#[channel(name = "test")]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct GetBuild {
    #[scope(project)]
    project_id: String,
    #[schemars(length(max = 64))]
    build_id: String,
}

mod narrowed {
    use super::*;
    /// Read one build of a project.
    #[derive(Action, Deserialize, JsonSchema)]
    #[action(name = "get_build", effect = observe)]
    #[channel(name = "test")]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    pub(crate) struct GetBuild {
        #[scope(project)]
        project_id: String,
        #[schemars(length(max = 32))]
        build_id: String,
    }
}

mod widened {
    use super::*;
    /// Read one build of a project.
    #[derive(Action, Deserialize, JsonSchema)]
    #[action(name = "get_build", effect = observe)]
    #[channel(name = "test")]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    pub(crate) struct GetBuild {
        #[scope(project)]
        project_id: String,
        #[schemars(length(max = 64))]
        build_id: String,
        verbose: Option<bool>,
    }
}

mod required {
    use super::*;
    /// Read one build of a project.
    #[derive(Action, Deserialize, JsonSchema)]
    #[action(name = "get_build", effect = observe)]
    #[channel(name = "test")]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    pub(crate) struct GetBuild {
        #[scope(project)]
        project_id: String,
        #[schemars(length(max = 64))]
        build_id: String,
        branch: String,
    }
}

/// Restart one worker of a project.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "restart_worker", effect = reversible_change)]
#[channel(name = "test")]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct RestartWorker {
    #[scope(project)]
    project_id: String,
    worker: String,
}

/// Read a project's billing report.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "read_report", effect = observe, credential = "report-api", data = [financial])]
#[channel(name = "test")]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ReadReport {
    #[scope(project)]
    project_id: String,
}

fn base() -> Catalog {
    Catalog::builder()
        .action::<GetBuild>()
        .action::<RestartWorker>()
        .build()
        .expect("catalog")
}

fn with_get_build(f: impl FnOnce(ActionSpec) -> ActionSpec) -> Catalog {
    Catalog::builder()
        .action_with_spec::<GetBuild>(f)
        .action::<RestartWorker>()
        .build()
        .expect("catalog")
}

fn with_restart_worker(f: impl FnOnce(ActionSpec) -> ActionSpec) -> Catalog {
    Catalog::builder()
        .action::<GetBuild>()
        .action_with_spec::<RestartWorker>(f)
        .build()
        .expect("catalog")
}

fn hash(catalog: &Catalog, name: &str) -> String {
    catalog
        .get(name)
        .expect("entry")
        .definition_hash()
        .to_owned()
}

struct Expect<'a> {
    tool: &'a str,
    status: &'a str,
    disposition: &'a str,
    terminal: bool,
    severity: &'a str,
    score: u8,
    reasons: &'a [&'a str],
    changes: Value,
    recommended: &'a str,
}

/// Compares every field of `actual` with the expectation; the two generated fields are
/// checked for form (and `decision_id` for determinism by the caller).
fn assert_decision(
    actual: &DriftDecision,
    baseline: &Baseline,
    live: Option<&Catalog>,
    approved: Option<&Catalog>,
    e: &Expect<'_>,
) {
    let live_hash = live.map(|c| hash(c, e.tool));
    let baseline_hash = approved.map(|c| hash(c, e.tool));
    let expected = json!({
        "schema_version": "0.1",
        "gateway_id": "gw-test",
        "server_id": "builds-app",
        "tool_name": e.tool,
        "approved_baseline_id": baseline.baseline_id,
        "live_tool_hash": live_hash,
        "baseline_tool_hash": baseline_hash,
        "drift_detected": e.status != "clean",
        "drift_status": e.status,
        "core_disposition": e.disposition,
        "terminal": e.terminal,
        "severity": e.severity,
        "risk_score": e.score,
        "reasons": e.reasons,
        "changes": e.changes,
        "recommended_action": e.recommended,
        "receipt_id": null,
    });
    let mut actual_json = serde_json::to_value(actual).expect("decision serializes");
    let object = actual_json.as_object_mut().expect("object");
    let decision_id = object.remove("decision_id").expect("decision_id");
    let issued_at = object.remove("issued_at").expect("issued_at");
    let id = decision_id.as_str().expect("string");
    assert!(id.starts_with("dd_") && id.len() == 35, "{id}");
    let at = issued_at.as_str().expect("string");
    assert!(
        at.len() >= 20
            && at.as_bytes()[4] == b'-'
            && at.as_bytes()[10] == b'T'
            && at.ends_with('Z'),
        "issued_at is RFC 3339 UTC: {at}"
    );
    let expected = expected.as_object().expect("object");
    // Compared as sets: a map's key order depends on serde_json's `preserve_order` (which
    // cedar-policy turns on in a workspace build) and on how keys were removed.
    assert_eq!(
        object.keys().collect::<std::collections::BTreeSet<_>>(),
        expected.keys().collect::<std::collections::BTreeSet<_>>(),
        "the decision has exactly the DESIGN.md fields"
    );
    for (field, value) in expected {
        assert_eq!(&object[field], value, "{}: field `{field}`", e.tool);
    }
}

fn guard(live: &Catalog, baseline: Baseline) -> BaselineGuard {
    BaselineGuard::new(live, baseline).with_identity("gw-test", "builds-app")
}

/// Compares `live` with a baseline approved from `approved` and checks `get_build`'s decision.
fn check(live: &Catalog, approved: &Catalog, e: &Expect<'_>) {
    let baseline = Baseline::from_catalog(approved);
    let g = guard(live, baseline.clone());
    let decision = g.decision(e.tool).expect("decision");
    assert_decision(&decision, &baseline, Some(live), Some(approved), e);
    // The same comparison has the same id.
    let again = guard(live, baseline).decision(e.tool).expect("decision");
    assert_eq!(again.decision_id, decision.decision_id);
}

#[test]
fn an_unchanged_action_is_clean_and_allowed() {
    check(
        &base(),
        &base(),
        &Expect {
            tool: "get_build",
            status: "clean",
            disposition: "allowed",
            terminal: false,
            severity: "safe",
            score: 0,
            reasons: &[],
            changes: json!([]),
            recommended: "allow",
        },
    );
}

#[test]
fn a_description_only_change_is_changed_allowed_and_monitored() {
    let live = with_get_build(|s| s.with_description("Read one build of a project, with logs."));
    check(
        &live,
        &base(),
        &Expect {
            tool: "get_build",
            status: "changed",
            disposition: "allowed",
            terminal: false,
            severity: "low",
            score: 10,
            reasons: &["description_changed"],
            changes: json!([{"field": "/description", "before": "Read one build of a project.",
                "after": "Read one build of a project, with logs."}]),
            recommended: "monitor",
        },
    );
}

#[test]
fn a_narrowed_schema_is_changed_and_allowed() {
    let live = Catalog::builder()
        .action::<narrowed::GetBuild>()
        .action::<RestartWorker>()
        .build()
        .expect("catalog");
    check(
        &live,
        &base(),
        &Expect {
            tool: "get_build",
            status: "changed",
            disposition: "allowed",
            terminal: false,
            severity: "low",
            score: 20,
            reasons: &["schema_changed"],
            changes: json!([{"field": "/input_schema/properties/build_id/maxLength", "before": 64, "after": 32}]),
            recommended: "monitor",
        },
    );
}

#[test]
fn a_widened_schema_is_deferred_for_review() {
    let live = Catalog::builder()
        .action::<widened::GetBuild>()
        .action::<RestartWorker>()
        .build()
        .expect("catalog");
    let verbose =
        live.get("get_build").expect("entry").input_schema()["properties"]["verbose"].clone();
    check(
        &live,
        &base(),
        &Expect {
            tool: "get_build",
            status: "review_required",
            disposition: "deferred",
            terminal: false,
            severity: "medium",
            score: 45,
            reasons: &["schema_changed"],
            changes: json!([{"field": "/input_schema/properties/verbose", "before": null, "after": verbose}]),
            recommended: "require_review",
        },
    );
}

#[test]
fn a_new_required_parameter_is_deferred_for_review() {
    let live = Catalog::builder()
        .action::<required::GetBuild>()
        .action::<RestartWorker>()
        .build()
        .expect("catalog");
    let branch =
        live.get("get_build").expect("entry").input_schema()["properties"]["branch"].clone();
    check(
        &live,
        &base(),
        &Expect {
            tool: "get_build",
            status: "review_required",
            disposition: "deferred",
            terminal: false,
            severity: "medium",
            score: 55,
            reasons: &["required_parameters_changed", "schema_changed"],
            changes: json!([
                {"field": "/input_schema/properties/branch", "before": null, "after": branch},
                {"field": "/input_schema/required", "before": ["project_id", "build_id"],
                    "after": ["project_id", "build_id", "branch"]},
            ]),
            recommended: "require_review",
        },
    );
}

#[test]
fn an_effect_escalation_is_quarantined() {
    let live = with_get_build(|mut s| {
        s.effect = EffectClass::ReversibleChange;
        s.retry = RetryRule::Never;
        s
    });
    check(
        &live,
        &base(),
        &Expect {
            tool: "get_build",
            status: "quarantined",
            disposition: "denied",
            terminal: true,
            severity: "high",
            score: 90,
            reasons: &["effect_escalation", "retry_changed"],
            changes: json!([
                {"field": "/effect", "before": "observe", "after": "reversible_change"},
                {"field": "/retry", "before": "safe", "after": "never"},
            ]),
            recommended: "keep_quarantined",
        },
    );
}

#[test]
fn weakened_consent_is_quarantined() {
    let live = with_restart_worker(|s| s.with_consent(ConsentRule::None));
    check(
        &live,
        &base(),
        &Expect {
            tool: "restart_worker",
            status: "quarantined",
            disposition: "denied",
            terminal: true,
            severity: "high",
            score: 85,
            reasons: &["consent_weakened"],
            changes: json!([{"field": "/consent", "before": "session", "after": "none"}]),
            recommended: "keep_quarantined",
        },
    );
}

#[test]
fn internal_to_external_is_quarantined() {
    let live = with_restart_worker(|s| s.with_externality(Externality::External));
    check(
        &live,
        &base(),
        &Expect {
            tool: "restart_worker",
            status: "quarantined",
            disposition: "denied",
            terminal: true,
            severity: "high",
            score: 80,
            reasons: &["externality_changed"],
            changes: json!([{"field": "/externality", "before": "internal", "after": "external"}]),
            recommended: "keep_quarantined",
        },
    );
}

#[test]
fn added_data_classes_are_quarantined() {
    let live = with_get_build(|s| s.with_data_class(DataClass::PII));
    check(
        &live,
        &base(),
        &Expect {
            tool: "get_build",
            status: "quarantined",
            disposition: "denied",
            terminal: true,
            severity: "high",
            score: 75,
            reasons: &["data_classes_added"],
            changes: json!([{"field": "/data_classes", "before": [], "after": ["pii"]}]),
            recommended: "keep_quarantined",
        },
    );
}

#[test]
fn a_changed_credential_binding_is_quarantined() {
    let live = with_get_build(|s| s.with_credential("builds-admin"));
    check(
        &live,
        &base(),
        &Expect {
            tool: "get_build",
            status: "quarantined",
            disposition: "denied",
            terminal: true,
            severity: "high",
            score: 80,
            reasons: &["credential_changed"],
            changes: json!([{"field": "/credential", "before": null, "after": "builds-admin"}]),
            recommended: "keep_quarantined",
        },
    );
}

#[test]
fn a_changed_channel_target_is_quarantined() {
    let live =
        with_get_build(|s| s.with_target(Target::custom("test", json!({"path": "/v2/builds"}))));
    check(
        &live,
        &base(),
        &Expect {
            tool: "get_build",
            status: "quarantined",
            disposition: "denied",
            terminal: true,
            severity: "high",
            score: 80,
            reasons: &["target_changed"],
            changes: json!([{"field": "/target/definition/path", "before": null, "after": "/v2/builds"}]),
            recommended: "keep_quarantined",
        },
    );
}

#[test]
fn a_crate_version_bump_is_provenance_changed_and_monitored() {
    let build = |version: &str| {
        Catalog::builder()
            .provenance(Provenance::new(version))
            .action::<GetBuild>()
            .action::<RestartWorker>()
            .build()
            .expect("catalog")
    };
    check(
        &build("1.1.0"),
        &build("1.0.0"),
        &Expect {
            tool: "get_build",
            status: "changed",
            disposition: "allowed",
            terminal: false,
            severity: "low",
            score: 5,
            reasons: &["provenance_changed"],
            changes: json!([{"field": "/provenance/crate_version", "before": "1.0.0", "after": "1.1.0"}]),
            recommended: "monitor",
        },
    );
}

#[test]
fn a_changed_upstream_spec_is_provenance_changed_and_deferred() {
    let build = |spec: &str| {
        Catalog::builder()
            .provenance(Provenance::new("1.0.0"))
            .action::<GetBuild>()
            .upstream_spec::<GetBuild>(spec)
            .action::<RestartWorker>()
            .build()
            .expect("catalog")
    };
    let (old, new) = ("a".repeat(64), "b".repeat(64));
    check(
        &build(&new),
        &build(&old),
        &Expect {
            tool: "get_build",
            status: "review_required",
            disposition: "deferred",
            terminal: false,
            severity: "medium",
            score: 40,
            reasons: &["provenance_changed"],
            changes: json!([{"field": "/provenance/upstream_spec_hash", "before": old, "after": new}]),
            recommended: "require_review",
        },
    );
    // Only the action written against the spec carries its hash.
    assert_eq!(
        hash(&build(&new), "restart_worker"),
        hash(&build(&old), "restart_worker")
    );
}

#[test]
fn a_change_the_classifier_cannot_read_is_low_confidence_and_deferred() {
    let approved = with_get_build(|s| {
        s.with_data_class(DataClass::INTERNAL)
            .with_data_class(DataClass::PII)
    });
    let live = with_get_build(|s| {
        s.with_data_class(DataClass::PII)
            .with_data_class(DataClass::INTERNAL)
    });
    check(
        &live,
        &approved,
        &Expect {
            tool: "get_build",
            status: "review_required",
            disposition: "deferred",
            terminal: false,
            severity: "medium",
            score: 40,
            reasons: &["metadata_confidence_low"],
            changes: json!([{"field": "/data_classes", "before": ["internal", "pii"], "after": ["pii", "internal"]}]),
            recommended: "require_review",
        },
    );
}

#[test]
fn a_new_action_is_tool_added_and_not_callable_until_approved() {
    let approved = Catalog::builder()
        .action::<GetBuild>()
        .build()
        .expect("catalog");
    let live = base();
    let baseline = Baseline::from_catalog(&approved);
    let g = guard(&live, baseline.clone());
    let decision = g.decision("restart_worker").expect("decision");
    assert_decision(
        &decision,
        &baseline,
        Some(&live),
        None,
        &Expect {
            tool: "restart_worker",
            status: "review_required",
            disposition: "deferred",
            terminal: false,
            severity: "medium",
            score: 50,
            reasons: &["tool_added"],
            changes: json!([{"field": "", "before": null,
                "after": live.get("restart_worker").expect("entry").definition()}]),
            recommended: "approve_new_baseline",
        },
    );
}

#[test]
fn a_removed_action_is_tool_removed() {
    let approved = base();
    let live = Catalog::builder()
        .action::<GetBuild>()
        .build()
        .expect("catalog");
    let baseline = Baseline::from_catalog(&approved);
    let g = guard(&live, baseline.clone());
    assert!(g.decision("restart_worker").is_none(), "not a live action");
    let decisions = g.decisions();
    assert_eq!(
        decisions
            .iter()
            .map(|d| d.tool_name.as_str())
            .collect::<Vec<_>>(),
        ["get_build", "restart_worker"]
    );
    assert_decision(
        &decisions[1],
        &baseline,
        None,
        Some(&approved),
        &Expect {
            tool: "restart_worker",
            status: "changed",
            disposition: "allowed",
            terminal: false,
            severity: "low",
            score: 20,
            reasons: &["tool_removed"],
            changes: json!([{"field": "", "before": approved.get("restart_worker").expect("entry").definition(),
                "after": null}]),
            recommended: "approve_new_baseline",
        },
    );
}

#[test]
fn a_definition_without_a_canonical_form_is_a_canonicalization_error() {
    let live = with_get_build(|s| {
        s.with_target(Target::custom(
            "test",
            json!({"limit": 9_007_199_254_740_993_u64}),
        ))
    });
    assert!(
        live.get("get_build")
            .expect("entry")
            .canonical_error()
            .is_some()
    );
    let approved = base();
    check(
        &live,
        &approved,
        &Expect {
            tool: "get_build",
            status: "review_required",
            disposition: "error",
            terminal: false,
            severity: "high",
            score: 70,
            reasons: &["canonicalization_error"],
            changes: json!([{"field": "", "before": hash(&approved, "get_build"),
                "after": "not canonicalizable: the integer at /target/definition/limit is outside ±2^53 and has no exact RFC 8785 form"}]),
            recommended: "require_review",
        },
    );
}

#[test]
fn a_lockfile_entry_that_does_not_match_its_hash_is_a_canonicalization_error() {
    let approved = base();
    let text = Baseline::from_catalog(&approved).to_json();
    // Someone edits the approved definition by hand but leaves the hash.
    let edited = text.replacen(
        "\"effect\": \"observe\"",
        "\"effect\": \"irreversible_or_broad\"",
        1,
    );
    assert_ne!(edited, text);
    let baseline =
        Baseline::from_json(&edited, "edited.json").expect("ids only cover names and hashes");
    let g = guard(&approved, baseline.clone());
    let decision = g.decision("get_build").expect("decision");
    assert_decision(
        &decision,
        &baseline,
        Some(&approved),
        Some(&approved),
        &Expect {
            tool: "get_build",
            status: "review_required",
            disposition: "error",
            terminal: false,
            severity: "high",
            score: 70,
            reasons: &["canonicalization_error"],
            changes: json!([{"field": "/hash", "before": hash(&approved, "get_build"),
                "after": "the lockfile entry does not match its own definition"}]),
            recommended: "require_review",
        },
    );
}

#[test]
fn the_partner_form_carries_the_minimal_fields() {
    let live = with_get_build(|s| s.with_data_class(DataClass::PII));
    let g = guard(&live, Baseline::from_catalog(&base()));
    let partner =
        serde_json::to_value(g.decision("get_build").expect("decision").partner()).expect("json");
    assert_eq!(
        partner,
        json!({"server_id": "builds-app", "tool_name": "get_build", "drift_status": "quarantined",
            "core_disposition": "denied", "severity": "high", "reasons": ["data_classes_added"],
            "recommended_action": "keep_quarantined", "receipt_id": null})
    );
}

struct Harness {
    _dir: tempfile::TempDir,
    channel: Arc<ScriptedChannel>,
    journal: Arc<dyn Journal>,
    guard: Arc<BaselineGuard>,
    executor: Executor,
}

fn harness(live: Catalog, baseline: Baseline) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal: Arc<dyn Journal> =
        Arc::new(SqliteJournal::open(dir.path().join("journal.db")).expect("journal opens"));
    let channel = Arc::new(ScriptedChannel::new());
    let guard = Arc::new(guard(&live, baseline));
    let executor = Executor::builder(live)
        .journal_arc(Arc::clone(&journal))
        .channel_arc(channel.clone())
        .definition_guard(guard.clone())
        .dangerous()
        .auto_approve_consent()
        .done()
        .build()
        .expect("executor builds");
    Harness {
        _dir: dir,
        channel,
        journal,
        guard,
        executor,
    }
}

fn session() -> Session {
    Session::new("ses_drift").allow("project", ["proj_1"])
}

const BUILD_ARGS: fn() -> Value = || json!({"project_id": "proj_1", "build_id": "build_1"});

/// A refusal at stage 5: nothing dispatched, one audit record carrying the full decision,
/// whose receipt is the record's; the agent gets the partner form with the same receipt.
async fn assert_drift_refusal(
    h: &Harness,
    action: &str,
    args: Value,
    code: RefusalCode,
) -> DriftDecision {
    let result = h.executor.call(action, args, &session()).await;
    assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
    assert_eq!(result.origin, Some(Origin::Executor));
    assert_eq!(result.code, Some(code.into()));
    assert_eq!(h.channel.dispatches(), 0, "stage 5 refusals send nothing");
    let records = h.journal.records().await.expect("records");
    assert_eq!(records.len(), 1, "exactly one audit record");
    let event = &records[0].event;
    assert_eq!(event.phase, Phase::Refused);
    assert_eq!(event.code, Some(code.into()));
    assert_eq!(event.dispatches, 0);
    let receipt = result.receipt_id.clone().expect("receipt");
    assert_eq!(event.receipt_id, receipt);
    let audited = event
        .drift_decision
        .clone()
        .map(|d| *d)
        .expect("the decision is audited");
    assert_eq!(audited.receipt_id.as_ref(), Some(&receipt));
    let mut expected = (*h.guard.decision(action).expect("decision")).clone();
    expected.receipt_id = Some(receipt.clone());
    assert_eq!(
        audited, expected,
        "the audited decision is the start-up decision plus its receipt"
    );
    assert_eq!(result.drift, Some(expected.partner()));
    assert!(h.journal.verify().await.expect("verify").is_intact());
    audited
}

#[tokio::test]
async fn a_quarantined_action_is_refused_with_definition_drift_and_sends_nothing() {
    let live = with_get_build(|mut s| {
        s.effect = EffectClass::ReversibleChange;
        s.retry = RetryRule::Never;
        s
    });
    let h = harness(live, Baseline::from_catalog(&base()));
    let decision =
        assert_drift_refusal(&h, "get_build", BUILD_ARGS(), RefusalCode::DefinitionDrift).await;
    assert_eq!(decision.drift_status, DriftStatus::Quarantined);
    assert_eq!(decision.core_disposition, CoreDisposition::Denied);
    assert!(decision.terminal);
}

#[tokio::test]
async fn a_review_required_action_is_refused_with_the_decision_and_sends_nothing() {
    let live = Catalog::builder()
        .action::<widened::GetBuild>()
        .action::<RestartWorker>()
        .build()
        .expect("catalog");
    let h = harness(live, Baseline::from_catalog(&base()));
    let decision =
        assert_drift_refusal(&h, "get_build", BUILD_ARGS(), RefusalCode::ReviewRequired).await;
    assert_eq!(decision.core_disposition, CoreDisposition::Deferred);
    assert_eq!(decision.reasons, [ReasonCode::SchemaChanged]);
}

#[tokio::test]
async fn an_unapproved_new_action_is_refused_until_approved() {
    let approved = Catalog::builder()
        .action::<GetBuild>()
        .build()
        .expect("catalog");
    let h = harness(base(), Baseline::from_catalog(&approved));
    let decision = assert_drift_refusal(
        &h,
        "restart_worker",
        json!({"project_id": "proj_1", "worker": "w1"}),
        RefusalCode::ReviewRequired,
    )
    .await;
    assert_eq!(decision.reasons, [ReasonCode::ToolAdded]);
    assert_eq!(
        decision.recommended_action,
        RecommendedAction::ApproveNewBaseline
    );
}

#[tokio::test]
async fn a_canonicalization_error_is_refused() {
    let live = with_get_build(|s| {
        s.with_target(Target::custom(
            "test",
            json!({"limit": 9_007_199_254_740_993_u64}),
        ))
    });
    let h = harness(live, Baseline::from_catalog(&base()));
    let decision =
        assert_drift_refusal(&h, "get_build", BUILD_ARGS(), RefusalCode::DefinitionDrift).await;
    assert_eq!(decision.core_disposition, CoreDisposition::Error);
}

#[tokio::test]
async fn a_changed_but_allowed_action_is_called() {
    let live = with_get_build(|s| s.with_description("Read one build of a project, with logs."));
    let h = harness(live, Baseline::from_catalog(&base()));
    let result = h.executor.call("get_build", BUILD_ARGS(), &session()).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(result.drift, None);
    assert_eq!(h.channel.dispatches(), 1);
    let records = h.journal.records().await.expect("records");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].event.drift_decision, None);
}

#[tokio::test]
async fn approving_a_new_baseline_recomputes_decisions_and_notifies_subscribers() {
    let live = Catalog::builder()
        .action::<widened::GetBuild>()
        .action::<RestartWorker>()
        .build()
        .expect("catalog");
    let h = harness(live.clone(), Baseline::from_catalog(&base()));
    let mut changes = h.guard.subscribe();
    assert_eq!(h.guard.generation(), 0);
    assert!(h.guard.drift_detected());
    let refused = h.executor.call("get_build", BUILD_ARGS(), &session()).await;
    assert_eq!(refused.code, Some(RefusalCode::ReviewRequired.into()));

    let approved = h
        .guard
        .baseline()
        .approve(&live, &["get_build".to_owned()])
        .expect("approve");
    assert_eq!(h.guard.replace_baseline(approved.clone()), 1);
    tokio::time::timeout(Duration::from_secs(1), changes.changed())
        .await
        .expect("notified")
        .expect("sender alive");
    assert_eq!(*changes.borrow(), 1);
    assert!(!h.guard.drift_detected());
    let decision = h.guard.decision("get_build").expect("decision");
    assert_eq!(decision.drift_status, DriftStatus::Clean);
    assert_eq!(
        decision.approved_baseline_id.as_deref(),
        Some(approved.baseline_id.as_str())
    );

    let ok = h.executor.call("get_build", BUILD_ARGS(), &session()).await;
    assert_eq!(ok.status, Status::Completed, "{}", ok.to_json());
    assert_eq!(h.channel.dispatches(), 1);
}

#[test]
fn a_session_grant_does_not_cover_a_changed_definition() {
    // Session consent is keyed by the live definition hash: a grant given for the approved
    // definition is not found for the drifted one, so the human is asked again.
    let before = base();
    let after =
        with_restart_worker(|s| s.with_description("Restart one worker, draining it first."));
    let (old, new) = (
        hash(&before, "restart_worker"),
        hash(&after, "restart_worker"),
    );
    assert_ne!(old, new);
    let grants = SessionGrants::new();
    grants.grant(
        "ses_drift",
        "restart_worker",
        &old,
        Duration::from_secs(3600),
    );
    assert!(grants.has("ses_drift", "restart_worker", &old));
    assert!(!grants.has("ses_drift", "restart_worker", &new));
}

#[tokio::test]
async fn a_session_grant_is_asked_again_after_the_definition_changes() {
    use sallyport_core::consent::{ConsentDecision, FnConsent};
    use std::sync::atomic::{AtomicU32, Ordering};
    // Two builds of the application, the second with a changed definition: the human is
    // shown the definition hash they approve, and the second build asks again for its own.
    // (The grant store's refusal to match another hash is proven by the test above.)
    let asked = Arc::new(AtomicU32::new(0));
    let hashes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let run = |catalog: Catalog| {
        let asked = Arc::clone(&asked);
        let hashes = Arc::clone(&hashes);
        async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let guard = Arc::new(BaselineGuard::new(
                &catalog,
                Baseline::from_catalog(&catalog),
            ));
            let executor = Executor::builder(catalog)
                .journal(SqliteJournal::open(dir.path().join("j.db")).expect("journal"))
                .channel(ScriptedChannel::new())
                .definition_guard(guard)
                .consent(FnConsent::new(move |request| {
                    asked.fetch_add(1, Ordering::SeqCst);
                    hashes.lock().expect("hashes").push(request.definition_hash);
                    async { ConsentDecision::Approve }
                }))
                .build()
                .expect("executor");
            for _ in 0..2 {
                let r = executor
                    .call(
                        "restart_worker",
                        json!({"project_id": "proj_1", "worker": "w1"}),
                        &session(),
                    )
                    .await;
                assert_eq!(r.status, Status::Completed, "{}", r.to_json());
            }
        }
    };
    run(base()).await;
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "one session grant covers both calls"
    );
    let changed =
        with_restart_worker(|s| s.with_description("Restart one worker, draining it first."));
    run(changed).await;
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "the changed definition is asked again"
    );
    let hashes = hashes.lock().expect("hashes").clone();
    assert_ne!(
        hashes[0], hashes[1],
        "the human approved two different definitions"
    );
}

#[test]
fn the_lockfile_round_trips_sorted_and_checks_its_id() {
    let catalog = base();
    let baseline = Baseline::from_catalog(&catalog);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sallyport.baseline.json");
    baseline.save(&path).expect("save");
    let text = std::fs::read_to_string(&path).expect("read");
    assert!(
        text.starts_with("{\n  \"actions\": {\n    \"get_build\": {"),
        "{text}"
    );
    assert!(
        text.ends_with("\"format\": \"sallyport-baseline/1\"\n}\n"),
        "{text}"
    );
    assert_eq!(Baseline::load(&path).expect("load"), baseline);
    // Same approval, same id; different approval, different id.
    assert_eq!(
        Baseline::from_catalog(&base()).baseline_id,
        baseline.baseline_id
    );
    let other = Baseline::from_catalog(&with_get_build(|s| s.with_data_class(DataClass::PII)));
    assert_ne!(other.baseline_id, baseline.baseline_id);
    let forged = text.replace(&baseline.baseline_id, &other.baseline_id);
    let err = Baseline::from_json(&forged, "forged.json").expect_err("id mismatch");
    assert_eq!(
        err.to_string(),
        format!(
            "baseline id {} does not match its content (expected {})",
            other.baseline_id, baseline.baseline_id
        )
    );
}

#[test]
fn severities_and_statuses_are_ordered() {
    assert!(Severity::Safe < Severity::Low && Severity::High < Severity::Critical);
    assert!(
        DriftStatus::Clean < DriftStatus::Changed
            && DriftStatus::ReviewRequired < DriftStatus::Quarantined
    );
}

#[test]
fn read_report_binds_its_credential_in_the_definition() {
    let catalog = Catalog::builder()
        .action::<ReadReport>()
        .build()
        .expect("catalog");
    let definition = catalog.get("read_report").expect("entry").definition();
    assert_eq!(definition["credential"], "report-api");
    assert_eq!(definition["data_classes"], json!(["financial"]));
    assert_eq!(
        definition["provenance"],
        json!({"crate_version": null, "upstream_spec_hash": null})
    );
}

#[tokio::test]
async fn the_executor_loads_the_lockfile_at_build_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lockfile = dir.path().join("sallyport.baseline.json");
    let missing = Executor::builder(base())
        .journal(SqliteJournal::open(dir.path().join("j.db")).expect("journal"))
        .channel(ScriptedChannel::new())
        .baseline_lockfile(&lockfile)
        .build()
        .expect_err("no lockfile yet");
    assert!(
        matches!(missing, sallyport_core::executor::BuildError::Baseline(_)),
        "{missing}"
    );

    Baseline::from_catalog(&base())
        .save(&lockfile)
        .expect("save");
    let live = with_get_build(|s| s.with_data_class(DataClass::PII));
    let channel = Arc::new(ScriptedChannel::new());
    let executor = Executor::builder(live)
        .journal(SqliteJournal::open(dir.path().join("j2.db")).expect("journal"))
        .channel_arc(channel.clone())
        .baseline_lockfile(&lockfile)
        .build()
        .expect("executor");
    let refused = executor.call("get_build", BUILD_ARGS(), &session()).await;
    assert_eq!(refused.code, Some(RefusalCode::DefinitionDrift.into()));
    assert_eq!(
        refused.drift.as_ref().map(|d| d.reasons.clone()),
        Some(vec![ReasonCode::DataClassesAdded])
    );
    assert_eq!(channel.dispatches(), 0);
}

#[tokio::test]
async fn start_up_decisions_are_audited_with_their_receipts() {
    let approved = base();
    let live = Catalog::builder()
        .action_with_spec::<GetBuild>(|s| s.with_data_class(DataClass::PII))
        .build()
        .expect("catalog");
    let h = harness(live, Baseline::from_catalog(&approved));
    let audited = h
        .guard
        .record_decisions(h.journal.as_ref())
        .await
        .expect("audited");
    assert_eq!(
        audited
            .iter()
            .map(|d| d.tool_name.as_str())
            .collect::<Vec<_>>(),
        ["get_build", "restart_worker"],
        "the quarantined action and the removed one; clean actions are not audited"
    );
    let records = h.journal.records().await.expect("records");
    assert_eq!(records.len(), 2);
    for (record, decision) in records.iter().zip(&audited) {
        let event = &record.event;
        assert_eq!(decision.receipt_id.as_ref(), Some(&event.receipt_id));
        assert_eq!(event.drift_decision.as_deref(), Some(decision));
        assert_eq!(event.session_id, "baseline");
        assert_eq!(event.action, decision.tool_name);
        assert_eq!(event.dispatches, 0);
    }
    assert_eq!(
        records[0].event.code.as_ref().map(Code::as_str),
        Some("quarantined")
    );
    assert_eq!(records[0].event.status, Status::Rejected);
    assert_eq!(
        records[1].event.code.as_ref().map(Code::as_str),
        Some("changed")
    );
    assert_eq!(records[1].event.status, Status::Completed);
    assert_eq!(
        h.guard
            .decision("get_build")
            .expect("decision")
            .receipt_id
            .as_ref(),
        Some(&records[0].event.receipt_id),
        "the stored decision carries its audit receipt"
    );
    assert_eq!(
        h.guard.decisions()[1].receipt_id.as_ref(),
        Some(&records[1].event.receipt_id)
    );
    assert!(h.journal.verify().await.expect("verify").is_intact());
    assert_eq!(h.channel.dispatches(), 0);
}
