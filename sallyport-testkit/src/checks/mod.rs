//! The checks every HTTP action runs, one file per concern, and the findings a reviewer
//! should look at (`method_override`).
//!
//! Each check stands up its own [`Rig`] (a fresh upstream, vault and executor) so that no
//! check sees another's requests, consent asks or rejected credentials; all of them write to
//! the bench's one SQLite journal, which is verified at the end.

mod consent;
mod credential;
mod dropped;
mod method_override;
mod sensitive;
mod statics;
mod timeout;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sallyport_core::target::HttpTarget;
use sallyport_core::{ActionSpec, Session};
use serde_json::{Value, json};

use crate::report::{Check, CheckReport, Finding};
use crate::rig::Env;
use crate::sample::sample;

/// The field the bench adds to make an unknown field.
pub(crate) const UNKNOWN_FIELD: &str = "testkit_unknown_field";
/// The object the bench names when it steps outside a session's scope.
pub(crate) const OUTSIDE: &str = "testkit-outside-scope";

/// One HTTP action under test.
pub(crate) struct Subject<'a> {
    pub(crate) env: &'a Env,
    pub(crate) spec: ActionSpec,
    pub(crate) http: HttpTarget,
    pub(crate) arguments: Value,
    sessions: AtomicU64,
}

impl<'a> Subject<'a> {
    pub(crate) fn new(env: &'a Env, spec: ActionSpec, http: HttpTarget, arguments: Value) -> Self {
        Self {
            env,
            spec,
            http,
            arguments,
            sessions: AtomicU64::new(0),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    fn session_id(&self, check: Check) -> String {
        let n = self.sessions.fetch_add(1, Ordering::SeqCst);
        format!("testkit-{}-{}-{n}", self.spec.name, check.as_str())
    }

    /// The scope value the arguments give tagged field `field`.
    fn scope_value(&self, field: &str) -> Option<String> {
        match self.arguments.get(field)? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        }
    }

    /// A session that allows exactly the objects the arguments name.
    pub(crate) fn session(&self, check: Check) -> Session {
        let mut session = Session::new(self.session_id(check));
        for tag in &self.spec.scope_tags {
            if let Some(value) = self.scope_value(&tag.field) {
                session = session.allow(tag.kind.to_string(), [value]);
            }
        }
        session
    }

    /// A session whose scope of `kind` holds only an object the arguments do not name.
    pub(crate) fn session_outside(&self, check: Check, kind: &str) -> Session {
        let mut session = Session::new(self.session_id(check));
        for tag in &self.spec.scope_tags {
            if tag.kind == kind {
                continue;
            }
            if let Some(value) = self.scope_value(&tag.field) {
                session = session.allow(tag.kind.to_string(), [value]);
            }
        }
        session.allow(kind.to_owned(), [OUTSIDE])
    }

    /// The arguments plus one field the schema does not declare.
    pub(crate) fn with_unknown_field(&self) -> Value {
        let mut arguments = self.arguments.clone();
        if let Some(object) = arguments.as_object_mut() {
            object.insert(UNKNOWN_FIELD.to_owned(), json!("x"));
        }
        arguments
    }

    /// A success body of the declared result's shape (`{}` without one).
    pub(crate) fn success_body(&self) -> Value {
        self.http
            .result
            .as_ref()
            .map_or_else(|| json!({}), |shape| sample(&shape.schema))
    }

    /// The scope kinds the action's fields are tagged with, each once.
    pub(crate) fn scope_kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = Vec::new();
        for tag in &self.spec.scope_tags {
            if !kinds.iter().any(|k| *k == tag.kind) {
                kinds.push(tag.kind.to_string());
            }
        }
        kinds
    }

    /// The longest one request of this action may wait for an answer.
    pub(crate) fn timeout(&self) -> Duration {
        self.http
            .total_timeout_ms
            .map_or(self.env.timeout, Duration::from_millis)
    }
}

/// What a reviewer should look at in `spec`, whatever its channel: findings are never
/// failures.
pub(crate) fn findings(spec: &ActionSpec) -> Vec<Finding> {
    method_override::reviewed(spec).into_iter().collect()
}

/// Runs every check on an HTTP action.
pub(crate) async fn run_http(subject: &Subject<'_>) -> Vec<CheckReport> {
    vec![
        statics::unknown_field(subject).await,
        statics::out_of_scope(subject).await,
        consent::denied(subject).await,
        timeout::after_commit(subject).await,
        sensitive::never_leaves(subject).await,
        credential::revoked(subject).await,
        dropped::recorded(subject).await,
        consent::order(subject).await,
    ]
}

/// A check the bench could not run because its own environment failed: a failure, never a
/// pass.
pub(crate) fn not_run(check: Check, error: &str) -> CheckReport {
    CheckReport::failed(
        check,
        format!("the bench could not run the check: {error}"),
        "fix the bench's environment (see the observation) and run it again",
    )
}

/// Waits until `ready` holds, polling every 5 ms, for at most `limit`.
pub(crate) async fn wait_until(limit: Duration, ready: impl Fn() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if ready() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ready()
}

/// "1 request" / "3 requests".
pub(crate) fn requests(n: usize) -> String {
    if n == 1 {
        "1 request".to_owned()
    } else {
        format!("{n} requests")
    }
}
