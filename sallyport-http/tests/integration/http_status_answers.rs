//! Answers whose status says what the result is, against the real test upstream on
//! 127.0.0.1:0 (which counts every request) and a real SQLite journal, shaped as GitHub's
//! document answers:
//!
//! - a workflow dispatch answers `204 No Content`; with `status(204) = completed(empty)` that
//!   is `completed` with no data, where parsing the (absent) body as the result type made it
//!   `unknown`;
//! - "is this pull request merged?" answers `204` for yes and `404` for no; with
//!   `status(…) = completed(value = …)` each is `completed` with its answer, whatever body
//!   the 404 carries;
//! - a 404 without a rule is still `rejected`/`not_found`;
//! - `completed(empty)` with a result type that cannot be `null` fails the catalog build.

use std::path::PathBuf;

use sallyport_core::catalog::CatalogError;
use sallyport_core::code::UpstreamCode;
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::ActionResult;
use sallyport_core::target::{StatusResult, Target};
use sallyport_core::{Action, ActionSpec, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Received, Reply, Upstream, audit_event, journal_dispatches};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One workflow run, as the dispatch returns it with `return_run_details`.
#[derive(Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
struct Run {
    workflow_run_id: u64,
}

/// Start one workflow run. GitHub answers 204 with no body unless `return_run_details` is
/// set, and 200 with the run when it is.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "dispatch_workflow", effect = reversible_change)]
#[http(
    post = "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches",
    status(204) = completed(empty),
    result = Option<Run>
)]
struct DispatchWorkflow {
    owner: String,
    repo: String,
    workflow_id: String,
    r#ref: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    return_run_details: Option<bool>,
}

/// Whether one pull request is merged.
#[derive(Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
struct Merged {
    merged: bool,
}

/// Tell whether one pull request is merged: 204 if it is, 404 if it is not.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "check_if_merged", effect = observe)]
#[http(
    get = "/repos/{owner}/{repo}/pulls/{pull_number}/merge",
    status(204) = completed(value = r#"{"merged": true}"#),
    status(404) = completed(value = r#"{"merged": false}"#),
    result = Merged
)]
struct CheckIfMerged {
    owner: String,
    repo: String,
    pull_number: u64,
}

/// Read one pull request; a 404 here means there is no such pull request.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_pull", effect = observe)]
#[http(get = "/repos/{owner}/{repo}/pulls/{pull_number}", result = Merged)]
struct GetPull {
    owner: String,
    repo: String,
    pull_number: u64,
}

/// Start one workflow run, with the run as a result that a 204 cannot carry.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "dispatch_workflow_for_run", effect = reversible_change)]
#[http(
    post = "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches",
    status(204) = completed(empty),
    result = Run
)]
struct DispatchWorkflowForRun {
    owner: String,
    repo: String,
    workflow_id: String,
}

/// `spec` with the HTTP target's status rules removed: the action as it was before it could
/// say what a status means.
fn without_status_rules(mut spec: ActionSpec) -> ActionSpec {
    if let Target::Http(http) = &mut spec.target {
        http.statuses.clear();
    }
    spec
}

struct Rig {
    upstream: Upstream,
    executor: Executor,
    journal: PathBuf,
    _dir: tempfile::TempDir,
}

async fn rig(reply: impl Fn(&Received) -> Reply + Send + Sync + 'static) -> Rig {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let catalog = Catalog::builder()
        .action::<DispatchWorkflow>()
        .action::<CheckIfMerged>()
        .action::<GetPull>()
        .build()
        .expect("catalog");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(&journal).expect("journal"))
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .channel(
            HttpChannel::builder()
                .base_url(upstream.url())
                .build()
                .expect("channel"),
        )
        .build()
        .expect("executor");
    Rig {
        upstream,
        executor,
        journal,
        _dir: dir,
    }
}

impl Rig {
    async fn call(&self, action: &str, args: Value) -> ActionResult {
        self.executor.call(action, args, &Session::new("s1")).await
    }

    fn dispatches(&self, r: &ActionResult) -> u32 {
        journal_dispatches(&self.journal, r.attempt_id.as_str())
    }
}

/// A reply with `status` and no body at all.
fn no_content(status: u16) -> Reply {
    Reply::Raw(status, Vec::new(), bytes::Bytes::new())
}

fn dispatch_args() -> Value {
    json!({"owner": "octo", "repo": "hello", "workflow_id": "ci.yml", "ref": "main"})
}

fn pull_args(pull_number: u64) -> Value {
    json!({"owner": "octo", "repo": "hello", "pull_number": pull_number})
}

#[tokio::test]
async fn a_dispatch_answered_204_is_completed_with_no_data() {
    let rig = rig(|_| no_content(204)).await;
    let r = rig.call("dispatch_workflow", dispatch_args()).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(r.code, None);
    assert_eq!(r.data, None);
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(rig.dispatches(&r), 1);
    let audit = audit_event(&rig.journal, r.attempt_id.as_str());
    assert_eq!(audit["status"], "completed", "{audit}");

    // The typed call decodes "no data" as the declared `Option<Run>`.
    let typed = rig
        .executor
        .run(
            &DispatchWorkflow {
                owner: "octo".into(),
                repo: "hello".into(),
                workflow_id: "ci.yml".into(),
                r#ref: "main".into(),
                return_run_details: None,
            },
            &Session::new("s1"),
        )
        .await;
    assert_eq!(typed.completed().ok(), Some(None));
    assert_eq!(rig.upstream.requests(), 2);
}

#[tokio::test]
async fn a_dispatch_answered_200_with_the_run_still_reads_the_body() {
    let rig = rig(|_| Reply::Json(200, json!({"workflow_run_id": 42, "html_url": "x"}))).await;
    let mut args = dispatch_args();
    args["return_run_details"] = json!(true);
    let r = rig.call("dispatch_workflow", args).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(r.data, Some(json!({"workflow_run_id": 42})));
}

#[tokio::test]
async fn without_the_rule_the_same_204_is_a_false_unknown() {
    // The defect this fixes, shown against the same server: the 204's absent body parsed as
    // the declared result.
    let upstream = Upstream::start(|_| no_content(204)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = Catalog::builder()
        .action_with_spec::<DispatchWorkflow>(without_status_rules)
        .build()
        .expect("catalog");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .channel(
            HttpChannel::builder()
                .base_url(upstream.url())
                .build()
                .expect("channel"),
        )
        .build()
        .expect("executor");
    let r = executor
        .call("dispatch_workflow", dispatch_args(), &Session::new("s1"))
        .await;
    assert_eq!(r.status, Status::Unknown, "{}", r.to_json());
    assert_eq!(r.code, Some(UpstreamCode::UnexpectedResponse.into()));
    assert_eq!(upstream.requests(), 1);
}

#[tokio::test]
async fn check_if_merged_reads_204_as_merged_and_404_as_not_merged() {
    let rig = rig(|received| {
        if received.path.ends_with("/pulls/1/merge") {
            no_content(204)
        } else {
            // GitHub's 404 carries an error document; the status is the answer, not it.
            Reply::Json(
                404,
                json!({"message": "Not Found", "documentation_url": "https://docs.github.com"}),
            )
        }
    })
    .await;
    let merged = rig.call("check_if_merged", pull_args(1)).await;
    assert_eq!(merged.status, Status::Completed, "{}", merged.to_json());
    assert_eq!(merged.data, Some(json!({"merged": true})));
    assert_eq!(merged.code, None);

    let open = rig.call("check_if_merged", pull_args(2)).await;
    assert_eq!(open.status, Status::Completed, "{}", open.to_json());
    assert_eq!(open.data, Some(json!({"merged": false})));
    assert_eq!(open.code, None);
    assert_eq!(open.reason, None);
    assert_eq!(rig.upstream.requests(), 2);
    let audit = audit_event(&rig.journal, open.attempt_id.as_str());
    assert_eq!(audit["status"], "completed", "{audit}");

    let typed = rig
        .executor
        .run(
            &CheckIfMerged {
                owner: "octo".into(),
                repo: "hello".into(),
                pull_number: 2,
            },
            &Session::new("s1"),
        )
        .await;
    assert_eq!(typed.completed().ok(), Some(Merged { merged: false }));
}

#[tokio::test]
async fn a_404_without_a_rule_is_still_rejected_not_found() {
    let rig = rig(|_| Reply::Json(404, json!({"message": "Not Found"}))).await;
    let r = rig.call("get_pull", pull_args(3)).await;
    assert_eq!(r.status, Status::Rejected, "{}", r.to_json());
    assert_eq!(r.code, Some(UpstreamCode::NotFound.into()));
    assert_eq!(r.data, None);
    assert_eq!(rig.upstream.requests(), 1);
}

#[test]
fn completed_empty_with_a_result_that_needs_a_body_fails_the_catalog_build() {
    let error = Catalog::builder()
        .action::<DispatchWorkflowForRun>()
        .build()
        .expect_err("a Run cannot be null");
    let CatalogError::InvalidSpec { name, source } = &error else {
        panic!("an invalid spec: {error}");
    };
    assert_eq!(name, "dispatch_workflow_for_run");
    assert_eq!(
        source.to_string(),
        "the result declared for HTTP 204 is refused: the declared result type cannot read \
         null: response does not match the declared result: invalid type: null, expected \
         struct Run"
    );
    // The same refusal reaches the executor's builder through the catalog it is given; the
    // rule is in the spec as the derive wrote it.
    let Target::Http(http) = DispatchWorkflowForRun::spec().target else {
        panic!("an HTTP target");
    };
    assert_eq!(
        http.declared_rule(204).map(|rule| &rule.result),
        Some(&StatusResult::Empty)
    );
}
