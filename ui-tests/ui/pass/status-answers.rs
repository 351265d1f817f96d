//! `status(code) = completed(empty)` and `status(code) = completed(value = "…")` compile into
//! status rules whose result is a constant, which the card shows.
#![deny(warnings)]

use sallyport_core::Action;
use sallyport_core::outcome::Status;
use sallyport_core::target::{StatusResult, Target};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether the pull request is merged.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Merged {
    merged: bool,
}

/// Tell whether one pull request is merged.
#[derive(Action, Deserialize, JsonSchema)]
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

/// Start one workflow run.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "dispatch_workflow", effect = reversible_change)]
#[http(
    post = "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches",
    status(204) = completed(empty),
    result = ()
)]
struct DispatchWorkflow {
    owner: String,
    repo: String,
    workflow_id: String,
    r#ref: String,
}

fn main() {
    let spec = CheckIfMerged::spec();
    assert_eq!(spec.check(), Ok(()));
    let Target::Http(http) = &spec.target else {
        panic!("an HTTP target");
    };
    let rule = http.declared_rule(404).expect("a rule for 404");
    assert_eq!(rule.status, Status::Completed);
    assert_eq!(
        rule.result,
        StatusResult::Value(serde_json::json!({"merged": false}))
    );
    assert!(spec.card().contains(
        "Answers: HTTP 204 means completed with `{\"merged\":true}`; HTTP 404 means completed \
         with `{\"merged\":false}`.\n"
    ));

    let spec = DispatchWorkflow::spec();
    assert_eq!(spec.check(), Ok(()));
    let Target::Http(http) = &spec.target else {
        panic!("an HTTP target");
    };
    assert_eq!(
        http.declared_rule(204).map(|rule| &rule.result),
        Some(&StatusResult::Empty)
    );
}
