//! Effective permission probes through the executor: an accepted probe quarantines every
//! action of its credential (refused at stage 5, nothing sent); denials and every kind of
//! failure quarantine nothing; production upstreams are skipped unless allowed; every run is
//! audited in a real SQLite journal.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use sallyport_core::code::{Code, RefusalCode};
use sallyport_core::drift::probe::{
    PermissionProbe, ProbeClass, ProbeEnvironment, ProbeObservation, ProbeRequest, ProbeRunner,
    Prober,
};
use sallyport_core::drift::{Baseline, BaselineGuard, DriftStatus, ReasonCode, Severity};
use sallyport_core::journal::{Journal, Phase, SqliteJournal};
use sallyport_core::outcome::Status;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_tests::scripted::ScriptedChannel;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

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

/// Read one build of a project.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_build", effect = observe)]
#[channel(name = "test")]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct GetBuild {
    #[scope(project)]
    project_id: String,
    build_id: String,
}

/// A runner that answers every probe with one observation and counts the probes it sent.
struct FixedRunner {
    environment: ProbeEnvironment,
    observation: ProbeObservation,
    sent: AtomicU32,
    at: std::sync::Mutex<Vec<tokio::time::Instant>>,
}

#[async_trait]
impl ProbeRunner for FixedRunner {
    fn environment(&self) -> ProbeEnvironment {
        self.environment
    }
    async fn run(&self, _probe: &PermissionProbe) -> ProbeObservation {
        self.sent.fetch_add(1, Ordering::SeqCst);
        self.at
            .lock()
            .expect("at")
            .push(tokio::time::Instant::now());
        self.observation.clone()
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    channel: Arc<ScriptedChannel>,
    journal: Arc<dyn Journal>,
    guard: Arc<BaselineGuard>,
    executor: Executor,
}

fn harness() -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal: Arc<dyn Journal> =
        Arc::new(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"));
    let catalog = Catalog::builder()
        .action::<ReadReport>()
        .action::<GetBuild>()
        .build()
        .expect("catalog");
    let guard = Arc::new(BaselineGuard::new(
        &catalog,
        Baseline::from_catalog(&catalog),
    ));
    let vault = MemoryVault::new();
    vault.set(
        CredentialMeta {
            name: "report-api".into(),
            kind: CredentialKind::Bearer,
            binding: Binding::url("http://127.0.0.1"),
            version: 1,
        },
        Secret::new("report-token-value"),
    );
    let channel = Arc::new(ScriptedChannel::new());
    let executor = Executor::builder(catalog)
        .journal_arc(Arc::clone(&journal))
        .channel_arc(channel.clone())
        .vault(vault)
        .definition_guard(guard.clone())
        .build()
        .expect("executor");
    Harness {
        _dir: dir,
        channel,
        journal,
        guard,
        executor,
    }
}

fn probe() -> PermissionProbe {
    PermissionProbe::for_credential(
        "read_other_tenant_report",
        "report-api",
        ProbeRequest::get("/v1/projects/proj_other_tenant/report"),
    )
}

fn runner(environment: ProbeEnvironment, observation: ProbeObservation) -> Arc<FixedRunner> {
    Arc::new(FixedRunner {
        environment,
        observation,
        sent: AtomicU32::new(0),
        at: std::sync::Mutex::new(Vec::new()),
    })
}

fn session() -> Session {
    Session::new("ses_probe").allow("project", ["proj_1"])
}

#[tokio::test]
async fn an_accepted_probe_quarantines_the_credentials_actions_and_sends_nothing() {
    let h = harness();
    let run = runner(
        ProbeEnvironment::NonProduction,
        ProbeObservation::Response {
            status: 200,
            well_formed: true,
        },
    );
    let prober = Prober::new(
        vec![probe()],
        run.clone(),
        h.guard.clone(),
        h.journal.clone(),
    );
    let reports = prober.run().await;
    assert_eq!(run.sent.load(Ordering::SeqCst), 1);
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].class, ProbeClass::EffectivePermissionExpansion);
    assert_eq!(reports[0].quarantined, ["read_report"]);
    assert_eq!(h.guard.generation(), 1);

    // The probe run is audited.
    let records = h.journal.records().await.expect("records");
    assert_eq!(records.len(), 1);
    let event = &records[0].event;
    assert_eq!(Some(&event.receipt_id), reports[0].receipt_id.as_ref());
    assert_eq!(event.action, "probe:read_other_tenant_report");
    assert_eq!(
        event.code.as_ref().map(Code::as_str),
        Some("effective_permission_expansion")
    );
    assert_eq!(
        event.request.as_deref(),
        Some("GET /v1/projects/proj_other_tenant/report")
    );
    assert_eq!(event.upstream_status, Some(200));
    assert_eq!(event.phase, Phase::Finished);

    let decision = h.guard.decision("read_report").expect("decision");
    assert_eq!(decision.drift_status, DriftStatus::Quarantined);
    assert_eq!(decision.reasons, [ReasonCode::EffectivePermissionExpansion]);
    assert_eq!(decision.severity, Severity::High);
    assert_eq!(decision.risk_score, 90);
    assert!(decision.terminal);
    assert_eq!(
        serde_json::to_value(&decision.changes).expect("json"),
        json!([{"field": "/effective_permissions/read_other_tenant_report",
            "before": "denied", "after": {"accepted": true, "status": 200}}])
    );

    let refused = h
        .executor
        .call("read_report", json!({"project_id": "proj_1"}), &session())
        .await;
    assert_eq!(
        refused.code,
        Some(RefusalCode::DefinitionDrift.into()),
        "{}",
        refused.to_json()
    );
    assert_eq!(
        h.channel.dispatches(),
        0,
        "a quarantined credential sends nothing"
    );
    let records = h.journal.records().await.expect("records");
    let audited = records[1]
        .event
        .drift_decision
        .clone()
        .expect("decision audited");
    assert_eq!(audited.reasons, [ReasonCode::EffectivePermissionExpansion]);
    assert_eq!(
        audited.receipt_id.as_ref(),
        Some(&records[1].event.receipt_id)
    );

    // Actions of other credentials are untouched.
    let ok = h
        .executor
        .call(
            "get_build",
            json!({"project_id": "proj_1", "build_id": "b1"}),
            &session(),
        )
        .await;
    assert_eq!(ok.status, Status::Completed, "{}", ok.to_json());
    assert_eq!(h.channel.dispatches(), 1);

    // Approving a new baseline does not lift it; a human clearing the finding does.
    let catalog = h.executor.catalog().clone();
    h.guard.replace_baseline(Baseline::from_catalog(&catalog));
    assert_eq!(
        h.guard
            .decision("read_report")
            .expect("decision")
            .drift_status,
        DriftStatus::Quarantined
    );
    h.guard.clear_permission_expansion("report-api");
    assert_eq!(
        h.guard
            .decision("read_report")
            .expect("decision")
            .drift_status,
        DriftStatus::Clean
    );
}

#[tokio::test]
async fn denials_and_failures_are_never_expansion() {
    let observations = [
        (
            ProbeObservation::Response {
                status: 401,
                well_formed: true,
            },
            ProbeClass::Denied,
        ),
        (
            ProbeObservation::Response {
                status: 403,
                well_formed: true,
            },
            ProbeClass::Denied,
        ),
        (
            ProbeObservation::Response {
                status: 404,
                well_formed: true,
            },
            ProbeClass::NotFound,
        ),
        (
            ProbeObservation::Response {
                status: 429,
                well_formed: true,
            },
            ProbeClass::RateLimited,
        ),
        (
            ProbeObservation::Response {
                status: 500,
                well_formed: true,
            },
            ProbeClass::UpstreamError,
        ),
        (
            ProbeObservation::Response {
                status: 503,
                well_formed: false,
            },
            ProbeClass::UpstreamError,
        ),
        (
            ProbeObservation::Response {
                status: 200,
                well_formed: false,
            },
            ProbeClass::Malformed,
        ),
        (
            ProbeObservation::Response {
                status: 302,
                well_formed: true,
            },
            ProbeClass::Inconclusive,
        ),
        (ProbeObservation::Timeout, ProbeClass::NetworkFailure),
        (
            ProbeObservation::TransportError {
                detail: "connection refused".to_owned(),
            },
            ProbeClass::NetworkFailure,
        ),
    ];
    for (observation, class) in observations {
        let h = harness();
        let run = runner(ProbeEnvironment::NonProduction, observation.clone());
        let prober = Prober::new(
            vec![probe()],
            run.clone(),
            h.guard.clone(),
            h.journal.clone(),
        );
        let reports = prober.run().await;
        assert_eq!(reports[0].class, class, "{observation:?}");
        assert!(reports[0].quarantined.is_empty());
        assert_eq!(h.guard.generation(), 0, "no decision changed");
        assert_eq!(
            h.guard
                .decision("read_report")
                .expect("decision")
                .drift_status,
            DriftStatus::Clean
        );
        let records = h.journal.records().await.expect("records");
        assert_eq!(records.len(), 1, "every run is audited");
        assert_eq!(
            records[0].event.code.as_ref().map(Code::as_str),
            Some(class.as_str())
        );
        let ok = h
            .executor
            .call("read_report", json!({"project_id": "proj_1"}), &session())
            .await;
        assert_eq!(
            ok.status,
            Status::Completed,
            "{observation:?}: {}",
            ok.to_json()
        );
    }
}

#[tokio::test]
async fn probes_do_not_run_against_production_unless_allowed() {
    let h = harness();
    let accepted = ProbeObservation::Response {
        status: 200,
        well_formed: true,
    };
    let run = runner(ProbeEnvironment::Production, accepted);
    let prober = Prober::new(
        vec![probe()],
        run.clone(),
        h.guard.clone(),
        h.journal.clone(),
    );
    let reports = prober.run().await;
    assert_eq!(
        run.sent.load(Ordering::SeqCst),
        0,
        "nothing sent to production"
    );
    assert_eq!(reports[0].class, ProbeClass::Skipped);
    assert_eq!(reports[0].observation, None);
    let records = h.journal.records().await.expect("records");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].event.phase, Phase::Refused);
    assert_eq!(
        records[0].event.code.as_ref().map(Code::as_str),
        Some("skipped")
    );
    assert_eq!(records[0].event.dispatches, 0);

    let allowed = Prober::new(
        vec![probe()],
        run.clone(),
        h.guard.clone(),
        h.journal.clone(),
    )
    .allow_production();
    let reports = allowed.run().await;
    assert_eq!(run.sent.load(Ordering::SeqCst), 1);
    assert_eq!(reports[0].class, ProbeClass::EffectivePermissionExpansion);
}

#[tokio::test]
async fn a_scheduled_prober_runs_every_period() {
    let h = harness();
    let run = runner(
        ProbeEnvironment::NonProduction,
        ProbeObservation::Response {
            status: 403,
            well_formed: true,
        },
    );
    let prober = Arc::new(Prober::new(
        vec![probe()],
        run.clone(),
        h.guard.clone(),
        h.journal.clone(),
    ));
    let period = std::time::Duration::from_millis(100);
    let start = tokio::time::Instant::now();
    let task = prober.schedule(period);
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while run.sent.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("three scheduled runs within 10 s");
    task.abort();
    let at = run.at.lock().expect("at").clone();
    assert!(
        at[0] - start >= period,
        "the first run waits one period, not start-up"
    );
    for pair in at.windows(2).take(2) {
        assert!(
            pair[1] - pair[0] >= period - std::time::Duration::from_millis(5),
            "runs are a period apart"
        );
    }
    let records = h.journal.records().await.expect("records");
    assert!(records.len() >= 3, "every scheduled run is audited");
    assert!(
        records
            .iter()
            .all(|r| r.event.code.as_ref().map(Code::as_str) == Some("denied"))
    );
}
