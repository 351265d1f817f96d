//! The bench builder: which catalog, which example arguments, which timeout; and the run
//! over every action.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sallyport_core::journal::{Journal, SqliteJournal};
use sallyport_core::target::Target;
use sallyport_core::{Catalog, Session};
use serde_json::Value;

use crate::checks::{self, Subject};
use crate::logs::Logs;
use crate::report::{ActionReport, Check, CheckReport, Report};
use crate::rig::{Answer, Env, Rig};
use crate::sample::sample;
use crate::upstream::Fault;

/// The checks an SSH action would get, for the report.
const SSH_NOT_RUN: &str = "not applicable to SSH in this version: the bench runs HTTP \
upstreams only; the check applies to SSH actions, against a real sshd, and is not run here";

/// Builds a bench over a catalog: `sallyport_testkit::bench(&catalog)`.
///
/// Give an example of valid arguments per action with [`Bench::example`] wherever the input
/// schema has patterns, formats or ranges the bench cannot satisfy by itself; the report says
/// which actions need one.
#[must_use]
#[derive(Debug)]
pub struct Bench {
    catalog: Catalog,
    examples: BTreeMap<String, Value>,
    timeout: Duration,
}

/// A bench over `catalog`. See the crate documentation.
pub fn bench(catalog: &Catalog) -> Bench {
    Bench {
        catalog: catalog.clone(),
        examples: BTreeMap::new(),
        timeout: Duration::from_millis(750),
    }
}

impl Bench {
    /// Valid arguments for `action`, as an agent would send them. The objects its
    /// `#[scope(…)]` fields name become the session's scope.
    pub fn example(mut self, action: impl Into<String>, arguments: Value) -> Self {
        self.examples.insert(action.into(), arguments);
        self
    }

    /// How long one request waits for an answer, for actions that declare no timeout of their
    /// own (default 750 ms). The timeout and dropped-call checks wait this long per request.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs every check on every action, prints the report's one-line
    /// [`summary`](Report::summary) to stdout and returns the report. Never panics on a
    /// failing catalog: failures are in the report ([`Report::assert_passed`] panics with it).
    pub async fn run(self) -> Report {
        let setup = async {
            let dir = tempfile::Builder::new()
                .prefix("sallyport-testkit-")
                .tempdir()
                .map_err(|e| format!("no temporary directory: {e}"))?;
            let journal = SqliteJournal::open(dir.path().join("journal.db"))
                .map_err(|e| format!("the SQLite journal could not be opened: {e}"))?;
            Ok::<_, String>(Env {
                catalog: self.catalog.clone(),
                journal: Arc::new(journal),
                canary: format!("tkcanary-{}", uuid::Uuid::new_v4().simple()),
                logs: Logs::new(),
                timeout: self.timeout,
                _dir: dir,
            })
        };
        let env = match setup.await {
            Ok(env) => env,
            Err(e) => {
                return Report {
                    actions: self
                        .catalog
                        .entries()
                        .map(|entry| ActionReport {
                            action: entry.spec().name.to_string(),
                            channel: channel_of(&entry.spec().target),
                            effect: entry.spec().effect.as_str().to_owned(),
                            checks: vec![checks::not_run(Check::Arguments, &e)],
                            findings: checks::findings(entry.spec()),
                        })
                        .collect(),
                    journal_intact: None,
                };
            }
        };
        let mut actions = Vec::new();
        for entry in self.catalog.entries() {
            let spec = entry.spec().clone();
            let mut report = ActionReport {
                action: spec.name.to_string(),
                channel: channel_of(&spec.target),
                effect: spec.effect.as_str().to_owned(),
                checks: Vec::new(),
                findings: checks::findings(&spec),
            };
            match &spec.target {
                Target::Http(http) => {
                    let http = http.clone();
                    match self.arguments(&env, &spec.name, entry.input_schema()).await {
                        Ok((arguments, line)) => {
                            report
                                .checks
                                .push(CheckReport::passed(Check::Arguments, line));
                            let subject = Subject::new(&env, spec, http, arguments);
                            report.checks.extend(checks::run_http(&subject).await);
                        }
                        Err(failed) => report.checks.push(failed),
                    }
                }
                Target::Ssh(_) => {
                    for &check in Check::ALL {
                        report
                            .checks
                            .push(CheckReport::not_applicable(check, SSH_NOT_RUN));
                    }
                }
                other => {
                    let reason = match other.channel_name() {
                        Some(name) => format!(
                            "not applicable to the custom channel `{name}`: the bench runs HTTP \
                             actions (test your channel against a real server of its own)"
                        ),
                        None => "the action has no channel target; every call is refused with \
                                 `channel_unavailable`"
                            .to_owned(),
                    };
                    for &check in Check::ALL {
                        report
                            .checks
                            .push(CheckReport::not_applicable(check, reason.clone()));
                    }
                }
            }
            actions.push(report);
        }
        let journal_intact = env.journal.verify().await.ok().map(|v| v.is_intact());
        let report = Report {
            actions,
            journal_intact,
        };
        // One line by default, passed or not: a passing bench says what it checked (shown by
        // `cargo test -- --show-output`, or at once in a program); a failing one panics in
        // `assert_passed` with the whole report.
        println!("{}", report.summary());
        report
    }

    /// Valid arguments for `name`: the author's example, or a guess from the input schema,
    /// either accepted by the executor's static checks.
    async fn arguments(
        &self,
        env: &Env,
        name: &str,
        schema: &Value,
    ) -> Result<(Value, String), CheckReport> {
        let (arguments, source) = match self.examples.get(name) {
            Some(example) => (example.clone(), "the author's example"),
            None => (sample(schema), "a guess from the input schema"),
        };
        let rig = Rig::start(env, Fault::Answer(200, Value::Null), Answer::Deny)
            .await
            .map_err(|e| checks::not_run(Check::Arguments, &e))?;
        let mut session = Session::new(format!("testkit-{name}-arguments"));
        if let Some(entry) = env.catalog.get(name) {
            for tag in &entry.spec().scope_tags {
                if let Some(value) = arguments.get(tag.field.as_ref()) {
                    let value = value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_owned);
                    session = session.allow(tag.kind.to_string(), [value]);
                }
            }
        }
        match rig.executor.preflight(name, arguments.clone(), &session) {
            Ok(()) => Ok((
                arguments.clone(),
                format!("{source} passes the static checks: {arguments}"),
            )),
            Err(refusal) => {
                let fix = if self.examples.contains_key(name) {
                    format!(
                        "fix the example given with `.example(\"{name}\", …)`: the executor \
                         refuses it"
                    )
                } else {
                    format!(
                        "add `.example(\"{name}\", json!({{…}}))` to the bench with arguments an \
                         agent would send: the bench cannot invent values for this schema"
                    )
                };
                Err(CheckReport::failed(
                    Check::Arguments,
                    format!("{source} was refused: {refusal}"),
                    fix,
                ))
            }
        }
    }
}

fn channel_of(target: &Target) -> String {
    target.channel_name().unwrap_or("none").to_owned()
}
