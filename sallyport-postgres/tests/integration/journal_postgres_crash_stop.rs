//! A crash-stop of PostgreSQL mid-load (`pg_ctl stop -m immediate`: no checkpoint, no
//! goodbye to clients, as a power cut looks to the database) under real `pg-executor`
//! processes, then the server started again. The server is the test's own (`initdb` in a
//! temporary directory), so stopping it disturbs no other test. Afterwards: every request
//! the upstream received has its intent in the journal (an intent is durable before its
//! request leaves), no request was sent twice, every record an executor kept through the
//! crash was written, and once the reconciler has run no attempt is left unresolved, the
//! journal's send count equals the upstream's, and the chain verifies.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

const PROCESSES: usize = 3;
const CALLS: usize = 200;
const IN_FLIGHT: usize = 4;

/// A PostgreSQL server of the test's own, in a temporary directory.
struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
}

/// The newest PostgreSQL server binaries on the machine.
fn server_bin() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path().join("bin"))
                .filter(|bin| bin.join("initdb").exists() && bin.join("pg_ctl").exists())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(Path::file_name)
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    match dirs.pop() {
        Some(bin) => bin,
        None => {
            let found = Command::new("sh")
                .args(["-c", "command -v initdb"])
                .output()
                .expect("sh");
            let path = String::from_utf8_lossy(&found.stdout).trim().to_owned();
            assert!(
                !path.is_empty(),
                "this test starts a PostgreSQL server of its own: install the server binaries (initdb, pg_ctl)"
            );
            PathBuf::from(path)
                .parent()
                .expect("initdb's directory")
                .to_owned()
        }
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl Cluster {
    /// `initdb` and a start on a free port (as the `postgres` user when run as root: the
    /// server refuses to run as root).
    fn start() -> Self {
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("sallyport-crash-{}-{stamp}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("cluster dir");
        if is_root() {
            let chowned = Command::new("chown")
                .arg("postgres:")
                .arg(&dir)
                .status()
                .expect("chown");
            assert!(chowned.success(), "chown postgres: {}", dir.display());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let cluster = Self {
            bin: server_bin(),
            dir,
            port,
        };
        let data = cluster.dir.join("data");
        let initdb = cluster
            .as_pg(&cluster.bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--auth=trust",
                "--no-sync",
            ])
            .stdout(Stdio::null())
            .output()
            .expect("initdb");
        assert!(
            initdb.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        cluster.pg_ctl_start();
        cluster
    }

    fn as_pg(&self, program: &Path) -> Command {
        let mut cmd = if is_root() {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(program);
            cmd
        } else {
            Command::new(program)
        };
        cmd.current_dir(&self.dir);
        cmd
    }

    fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        self.as_pg(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(args)
            .stdout(Stdio::null())
            .output()
            .expect("pg_ctl")
    }

    fn pg_ctl_start(&self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories={}",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log");
        let started = self.pg_ctl(&[
            "-l",
            &log.display().to_string(),
            "-w",
            "-t",
            "60",
            "start",
            "-o",
            &options,
        ]);
        assert!(
            started.status.success(),
            "pg_ctl start: {}\n{}",
            String::from_utf8_lossy(&started.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// `pg_ctl stop -m immediate`: every server process quits at once, without a checkpoint.
    fn crash(&self) {
        let stopped = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        assert!(
            stopped.status.success(),
            "pg_ctl stop -m immediate: {}",
            String::from_utf8_lossy(&stopped.stderr)
        );
    }

    fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

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

/// The reconciler: the test's own executor on the same database and upstream.
fn reconciler(journal: PostgresJournal, upstream: &Upstream) -> Executor {
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "deploy-api",
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new("token-crash"),
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
            .base_url(upstream.url())
            .build()
            .expect("channel"),
    )
    .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
    .build()
    .expect("executor")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_stop_of_postgres_mid_load_loses_no_intent_and_sends_nothing_twice() {
    let cluster = Cluster::start();
    // The schema, before the executors start.
    drop(
        PostgresJournal::connect(&cluster.url())
            .await
            .expect("journal on the test's server"),
    );
    // Each build deployed once per POST it gets (a second POST of a build would show here);
    // a GET of a build answers 200 once it was deployed, 404 before.
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
    // A real API takes a few milliseconds: calls are in flight when the server stops.
    upstream.set_delay(Duration::from_millis(5));

    let start_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .saturating_add(Duration::from_millis(1500))
        .as_millis()
        .to_string();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_pg-executor"))
                .args([cluster.url(), upstream.url()])
                .arg(CALLS.to_string())
                .arg(IN_FLIGHT.to_string())
                .arg(&start_at)
                .args(["2000", "report"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn pg-executor")
        })
        .collect();

    // Mid-load: a quarter of the calls sent.
    let quarter = (PROCESSES * CALLS / 4) as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while upstream.requests() < quarter {
        assert!(Instant::now() < deadline, "the executors never got going");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let crashed_at = upstream.requests();
    cluster.crash();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    cluster.pg_ctl_start();

    let outputs = tokio::task::spawn_blocking(move || {
        sallyport_tests::children::wait_all(children, std::time::Duration::from_secs(600))
    })
    .await
    .expect("children");
    let mut answers: Vec<Value> = Vec::new();
    let mut refused_unsent = 0;
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
        let (last, calls) = lines.split_last().expect("lines");
        assert_eq!(
            last["kept_at_exit"], 0,
            "process {i} wrote every kept record"
        );
        refused_unsent += last["refused_unsent"].as_u64().expect("refused tries");
        assert_eq!(calls.len(), CALLS, "process {i} answered every call");
        answers.extend(calls.iter().cloned());
    }
    let count = |f: &dyn Fn(&Value) -> bool| answers.iter().filter(|a| f(a)).count();
    let completed = count(&|a| a["status"] == "completed");
    let pending_records = count(&|a| a["record_pending"] == true);
    // Every call ends completed: refused unsent while the server was away, it was made
    // again until it went through.
    assert_eq!(completed, PROCESSES * CALLS, "every call completed");

    // No request sent twice, and every request the upstream saw has its intent.
    let posts: Vec<Received> = upstream
        .received()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    let deployed = deployed
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

    let sql = sallyport_tests::postgres::client(&cluster.url()).await;
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

    // Receipts the executors handed out whose record the crash took: none (a record someone
    // waits for commits synchronously, so its receipt is on disk before the agent has it).
    let receipts: HashSet<String> = sql
        .query("SELECT receipt_id FROM sallyport_audit", &[])
        .await
        .expect("receipts")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let lost_receipts = answers
        .iter()
        .filter_map(|a| a["receipt_id"].as_str())
        .filter(|r| !receipts.contains(*r))
        .count();

    // The reconciler, once every executor has exited and its leases (2 s) ran out.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let journal = PostgresJournal::builder(&cluster.url())
        .owner("crash-reconciler")
        .connect()
        .await
        .expect("journal");
    let unresolved_before = journal.unresolved().await.expect("unresolved").len();
    let reconciler = reconciler(journal, &upstream);
    let reconciled = reconciler
        .reconcile(ReconcileOptions::new())
        .await
        .expect("reconcile");
    let journal = reconciler.journal();
    let unresolved_after = journal.unresolved().await.expect("unresolved");
    let row = sql
        .query_one(
            "SELECT coalesce(sum(dispatches), 0)::BIGINT FROM sallyport_attempts
             WHERE action = 'create_deployment'",
            &[],
        )
        .await
        .expect("dispatches");
    let journal_sends: i64 = row.get(0);
    eprintln!(
        "crash-stop after {crashed_at} requests: {} calls ({completed} completed, {pending_records} answered record_pending; {refused_unsent} tries refused unsent meanwhile); \
         POSTs {}, distinct keys {}, twice {twice}, intents missing {missing}; receipts lost with the crash {lost_receipts}; \
         unresolved before reconcile {unresolved_before}, reconciled {}, after {}; sends journal {journal_sends} upstream {}",
        answers.len(),
        posts.len(),
        distinct.len(),
        reconciled.len(),
        unresolved_after.len(),
        posts.len()
    );
    assert_eq!(
        lost_receipts, 0,
        "a receipt an executor handed out has no record after the crash"
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
