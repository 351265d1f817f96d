//! What the tests that take the journal's server away under real `pg-executor` processes
//! share (a crash-stop and restart; a failover to a standby): the counting upstream, the
//! fleet of executors (killed if the test fails before it waited for them), and the checks
//! that nothing was lost or sent twice once they are done.

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::executor::ReconcileOptions;
use sallyport_core::journal::Journal;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor};
use sallyport_http::HttpChannel;
use sallyport_postgres::PostgresJournal;
use sallyport_tests::http_server::{Received, Reply, Upstream};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Queue one build of a project: `pg-executor`'s action, with the read that settles it.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_deployment", effect = external_commitment, retry = idempotency_key,
         credential = "deploy-api", reconcile = "get_deployment")]
#[http(post = "/v1/projects/{project_id}/deployments", result = Created)]
struct CreateDeployment {
    project_id: String,
    build_id: String,
}

/// Read the deployment of one build.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_deployment", effect = observe, credential = "deploy-api")]
#[http(get = "/v1/projects/{project_id}/builds/{build_id}", result = Created)]
struct GetDeployment {
    project_id: String,
    build_id: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Created {
    id: String,
}

/// The HTTP upstream the executors deploy to, counting the deployments of each build.
pub(crate) struct Deployments {
    pub(crate) upstream: Upstream,
    /// Build → how many POSTs deployed it (a second POST of a build would show here).
    deployed: Arc<Mutex<HashMap<String, u32>>>,
}

impl Deployments {
    /// Each build deployed once per POST it gets; a GET of a build answers 200 once it was
    /// deployed, 404 before. Every answer takes 5 ms, as a real API's few milliseconds, so
    /// calls are in flight when the server goes.
    pub(crate) async fn start() -> Self {
        let deployed: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let seen = Arc::clone(&deployed);
        let upstream = Upstream::start(move |r: &Received| {
            let mut deployed = seen.lock().unwrap_or_else(PoisonError::into_inner);
            if r.method == "POST" {
                let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
                let build = format!(
                    "{}/{}",
                    r.path,
                    body["build_id"].as_str().unwrap_or_default()
                );
                *deployed.entry(build).or_insert(0) += 1;
                Reply::Idempotent(None)
            } else {
                let mut parts = r.path.rsplit('/');
                let build = parts.next().unwrap_or_default();
                let _ = parts.next();
                let project = parts.next().unwrap_or_default();
                let key = format!("/v1/projects/{project}/deployments/{build}");
                if deployed.contains_key(&key) {
                    Reply::Json(200, json!({ "id": build }))
                } else {
                    Reply::Json(404, json!({"error": "no such build"}))
                }
            }
        })
        .await;
        upstream.set_delay(Duration::from_millis(5));
        Self { upstream, deployed }
    }

    /// The reconciler: the test's own executor on `journal` and this upstream.
    fn reconciler(&self, journal: PostgresJournal) -> Executor {
        let vault = Arc::new(MemoryVault::new());
        vault.set(
            CredentialMeta::new(
                "deploy-api",
                CredentialKind::Bearer,
                Binding::url(self.upstream.url()),
            ),
            Secret::new("token-server-loss"),
        );
        Executor::builder(
            Catalog::builder()
                .action::<CreateDeployment>()
                .action::<GetDeployment>()
                .build()
                .expect("catalog"),
        )
        .journal(journal)
        .vault_arc(vault)
        .channel(
            HttpChannel::builder()
                .base_url(self.upstream.url())
                .build()
                .expect("channel"),
        )
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .build()
        .expect("executor")
    }
}

/// `pg-executor` processes in `report` mode (attempt leases of 2 s), killed when this is
/// dropped before [`Fleet::wait`] (a test failing mid-load leaves none behind).
pub(crate) struct Fleet {
    children: Vec<Child>,
    calls: usize,
}

impl Fleet {
    /// `processes` executors on `journal_url`, each making `calls` calls `in_flight` at a
    /// time, all starting 1.5 s from now.
    pub(crate) fn spawn(
        journal_url: &str,
        upstream: &Upstream,
        processes: usize,
        calls: usize,
        in_flight: usize,
    ) -> Self {
        let start_at = (now_ms() + 1500).to_string();
        let children = (0..processes)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_pg-executor"))
                    .args([journal_url.to_owned(), upstream.url()])
                    .arg(calls.to_string())
                    .arg(in_flight.to_string())
                    .arg(&start_at)
                    .args(["2000", "report"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn pg-executor")
            })
            .collect();
        Self { children, calls }
    }

    /// Waits (up to 10 minutes) for every executor to exit; each must have exited 0,
    /// answered every call, and written every record it kept through the outage.
    pub(crate) async fn wait(mut self) -> Answers {
        let children = std::mem::take(&mut self.children);
        let calls = self.calls;
        let outputs: Vec<Output> = tokio::task::spawn_blocking(move || {
            sallyport_tests::children::wait_all(children, Duration::from_secs(600))
        })
        .await
        .expect("children");
        let mut answers = Answers::default();
        for (i, out) in outputs.iter().enumerate() {
            assert!(
                out.status.success(),
                "process {i} exited {:?}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| serde_json::from_str(l).expect("a JSON line"))
                .collect();
            let (last, lines) = lines.split_last().expect("lines");
            assert_eq!(
                last["kept_at_exit"], 0,
                "process {i} wrote every kept record"
            );
            answers.refused_unsent += last["refused_unsent"].as_u64().expect("refused tries");
            assert_eq!(lines.len(), calls, "process {i} answered every call");
            answers.per_process.push(lines.to_vec());
        }
        answers
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The Unix time in milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Every call's last answer, by process, as `pg-executor` printed it (with `at_ms`, when it
/// was answered).
#[derive(Default)]
pub(crate) struct Answers {
    pub(crate) per_process: Vec<Vec<Value>>,
    /// Tries refused unsent (`journal_unavailable`) while the server was away.
    pub(crate) refused_unsent: u64,
}

impl Answers {
    fn all(&self) -> impl Iterator<Item = &Value> {
        self.per_process.iter().flatten()
    }
}

/// Checks, on the server `journal_url` reaches once the executors have exited, that no
/// request was sent twice, that every request the upstream saw has its intent in the
/// journal and every receipt an executor handed out its record, and, after the reconciler
/// ran (once the executors' leases ran out), that no attempt is unresolved, the journal
/// counts every request the upstream saw, every attempt has one record at most, and the
/// chain verifies. `what` begins the summary line it prints.
pub(crate) async fn check_nothing_lost_or_sent_twice(
    what: &str,
    journal_url: &str,
    deployments: &Deployments,
    answers: &Answers,
) {
    let upstream = &deployments.upstream;
    let calls = answers.all().count();
    let completed = answers.all().filter(|a| a["status"] == "completed").count();
    let pending_records = answers
        .all()
        .filter(|a| a["record_pending"] == true)
        .count();
    // Every call ends completed: refused unsent while the server was away, it was made
    // again until it went through.
    assert_eq!(completed, calls, "every call completed");

    // No request sent twice, and every request the upstream saw has its intent.
    let posts: Vec<Received> = upstream
        .received()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    let deployed = deployments
        .deployed
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let twice = deployed.values().filter(|n| **n > 1).count();
    assert_eq!(twice, 0, "a build was deployed twice");
    assert!(
        upstream.effects().values().all(|n| *n == 1),
        "a key committed twice"
    );
    let keys_sent: Vec<String> = posts
        .iter()
        // The header is a structured-field string: the key in quotes.
        .filter_map(|r| {
            r.header("idempotency-key")
                .map(|k| k.trim_matches('"').to_owned())
        })
        .collect();
    assert_eq!(keys_sent.len(), posts.len(), "every POST carries its key");
    let distinct: HashSet<&String> = keys_sent.iter().collect();
    assert_eq!(distinct.len(), keys_sent.len(), "a key was sent twice");

    let sql = sallyport_tests::postgres::client(journal_url).await;
    let stored: HashSet<String> = sql
        .query("SELECT idempotency_key FROM sallyport_attempts", &[])
        .await
        .expect("keys")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let missing = distinct.iter().filter(|k| !stored.contains(**k)).count();
    assert_eq!(
        missing, 0,
        "a request left without its intent in the journal"
    );

    // Receipts the executors handed out whose record the server's loss took: none (a
    // record someone waits for commits synchronously, so its receipt is durable before the
    // agent has it).
    let receipts: HashSet<String> = sql
        .query("SELECT receipt_id FROM sallyport_audit", &[])
        .await
        .expect("receipts")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let lost_receipts = answers
        .all()
        .filter_map(|a| a["receipt_id"].as_str())
        .filter(|r| !receipts.contains(*r))
        .count();

    // The reconciler, once every executor has exited and its leases (2 s) ran out.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let journal = PostgresJournal::builder(journal_url)
        .owner("server-loss-reconciler")
        .connect()
        .await
        .expect("journal");
    let unresolved_before = journal.unresolved().await.expect("unresolved").len();
    let reconciler = deployments.reconciler(journal);
    let reconciled = reconciler
        .reconcile(ReconcileOptions::new())
        .await
        .expect("reconcile");
    let journal = reconciler.journal();
    let unresolved_after = journal.unresolved().await.expect("unresolved");
    let journal_sends: i64 = sql
        .query_one(
            "SELECT coalesce(sum(dispatches), 0)::BIGINT FROM sallyport_attempts
             WHERE action = 'create_deployment'",
            &[],
        )
        .await
        .expect("dispatches")
        .get(0);
    eprintln!(
        "{what}: {calls} calls ({completed} completed, {pending_records} answered record_pending; {} tries refused unsent meanwhile); \
         POSTs {}, distinct keys {}, twice {twice}, intents missing {missing}; receipts lost {lost_receipts}; \
         unresolved before reconcile {unresolved_before}, reconciled {}, after {}; sends journal {journal_sends} upstream {}",
        answers.refused_unsent,
        posts.len(),
        distinct.len(),
        reconciled.len(),
        unresolved_after.len(),
        posts.len()
    );
    assert_eq!(
        lost_receipts, 0,
        "a receipt an executor handed out has no record"
    );
    assert!(unresolved_after.is_empty(), "{unresolved_after:?}");
    assert_eq!(
        journal_sends,
        posts.len() as i64,
        "the journal counts every request sent"
    );
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    // Every attempt closed by exactly one record.
    let doubled: i64 = sql
        .query_one(
            "SELECT count(*) FROM (SELECT attempt_id FROM sallyport_audit
             GROUP BY attempt_id HAVING count(*) > 1) d",
            &[],
        )
        .await
        .expect("doubled")
        .get(0);
    assert_eq!(doubled, 0, "an attempt has two records");
}
