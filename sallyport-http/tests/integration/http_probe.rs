//! Effective-permission probes sent over real HTTP: a probe the upstream denies changes
//! nothing; a probe it accepts quarantines the credential's actions, which are then refused
//! before anything is sent. Every run is audited.

use std::sync::Arc;

use sallyport_core::code::RefusalCode;
use sallyport_core::drift::probe::{
    PermissionProbe, ProbeClass, ProbeEnvironment, ProbeObservation, ProbeRequest, Prober,
};
use sallyport_core::drift::{Baseline, BaselineGuard};
use sallyport_core::journal::{Journal, SqliteJournal};
use sallyport_core::outcome::Status;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret, Vault};
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::{HttpChannel, HttpProbeRunner};
use sallyport_tests::http_server::{Reply, Upstream};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

const TOKEN: &str = "probe-token-5b1d";

/// Read one report of this tenant.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "read_report", effect = observe, credential = "report-api")]
#[http(get = "/v1/reports/{report_id}", result = ())]
struct ReadReport {
    report_id: String,
}

struct Rig {
    upstream: Upstream,
    executor: Executor,
    prober: Prober,
    journal: Arc<dyn Journal>,
    _dir: tempfile::TempDir,
}

async fn rig(other_tenant_status: u16) -> Rig {
    let upstream = Upstream::start(move |received| {
        if received.path.contains("tenant_other") {
            Reply::Json(other_tenant_status, json!({"id": "rep_other", "total": 1}))
        } else {
            Reply::Json(200, json!({"id": "rep_1"}))
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal: Arc<dyn Journal> =
        Arc::new(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"));
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "report-api",
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new(TOKEN),
    );
    let catalog = Catalog::builder()
        .action::<ReadReport>()
        .build()
        .expect("catalog");
    let guard = Arc::new(BaselineGuard::new(
        &catalog,
        Baseline::from_catalog(&catalog),
    ));
    let channel = HttpChannel::builder().build().expect("channel");
    let runner = HttpProbeRunner::new(
        channel.clone(),
        vault.clone() as Arc<dyn Vault>,
        ProbeEnvironment::NonProduction,
    );
    let prober = Prober::new(
        vec![PermissionProbe::for_credential(
            "read_other_tenant_report",
            "report-api",
            ProbeRequest::get("/v1/tenants/tenant_other/reports/rep_other"),
        )],
        Arc::new(runner),
        guard.clone(),
        Arc::clone(&journal),
    );
    let executor = Executor::builder(catalog)
        .journal_arc(Arc::clone(&journal))
        .vault_arc(vault)
        .channel(channel)
        .definition_guard(guard)
        .build()
        .expect("executor");
    Rig {
        upstream,
        executor,
        prober,
        journal,
        _dir: dir,
    }
}

#[tokio::test]
async fn a_denied_probe_quarantines_nothing() {
    let rig = rig(403).await;
    let reports = rig.prober.run().await;
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].class, ProbeClass::Denied);
    assert_eq!(
        reports[0].observation,
        Some(ProbeObservation::Response {
            status: 403,
            well_formed: true
        })
    );
    assert!(reports[0].quarantined.is_empty());
    let received = rig.upstream.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    let result = rig
        .executor
        .call(
            "read_report",
            json!({"report_id": "rep_1"}),
            &Session::new("s"),
        )
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(rig.upstream.requests(), 2);
}

#[tokio::test]
async fn an_accepted_probe_quarantines_the_credentials_actions_and_they_send_nothing() {
    let rig = rig(200).await;
    let reports = rig.prober.run().await;
    assert_eq!(reports[0].class, ProbeClass::EffectivePermissionExpansion);
    assert_eq!(reports[0].quarantined, ["read_report"]);
    assert!(reports[0].receipt_id.is_some());
    let before = rig.upstream.requests();
    let result = rig
        .executor
        .call(
            "read_report",
            json!({"report_id": "rep_1"}),
            &Session::new("s"),
        )
        .await;
    assert_eq!(
        result.code,
        Some(RefusalCode::DefinitionDrift.into()),
        "{}",
        result.to_json()
    );
    assert_eq!(
        rig.upstream.requests(),
        before,
        "a quarantined action sends nothing"
    );
    let audit =
        serde_json::to_string(&rig.journal.records().await.expect("records")).expect("json");
    assert!(audit.contains("effective_permission_expansion"), "{audit}");
    assert!(!audit.contains(TOKEN));
}

#[tokio::test]
async fn a_probe_that_finds_nothing_or_fails_upstream_is_never_expansion() {
    for (status, class) in [
        (404, ProbeClass::NotFound),
        (429, ProbeClass::RateLimited),
        (503, ProbeClass::UpstreamError),
    ] {
        let rig = rig(status).await;
        let reports = rig.prober.run().await;
        assert_eq!(reports[0].class, class, "status {status}");
        assert!(reports[0].quarantined.is_empty());
    }
}
