//! An OpenAPI document attached to the HTTP channel: every outgoing request is checked against
//! its operation before consent, and a request the upstream's API would reject is never sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::drift::DriftMode;
use sallyport_core::drift::openapi::OpenApi;
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::Status;
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Reply, Upstream};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Queue one build for an environment.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "create_deployment", effect = reversible_change, retry = idempotency_key)]
#[http(post = "/v1/projects/{project_id}/deployments", status(202) = pending)]
struct CreateDeployment {
    #[scope(project)]
    project_id: String,
    build_id: String,
    environment: String,
}

/// The same operation, from an action that also sends a field the upstream does not accept.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "create_deployment_with_priority", effect = reversible_change, retry = idempotency_key)]
#[http(post = "/v1/projects/{project_id}/deployments", status(202) = pending)]
struct CreateDeploymentWithPriority {
    #[scope(project)]
    project_id: String,
    build_id: String,
    environment: String,
    priority: u32,
}

/// An executor over `catalog` whose HTTP channel checks every request against the
/// deployments API document (strict), approving consent and counting how often it is asked.
fn executor_for(
    catalog: Catalog,
    upstream: &Upstream,
    dir: &tempfile::TempDir,
) -> (Executor, Arc<AtomicU32>) {
    let document =
        OpenApi::parse(include_str!("../fixtures/openapi/deployments.json")).expect("spec parses");
    let asked = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&asked);
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .channel(
            HttpChannel::builder()
                .base_url(upstream.url())
                .openapi(document, DriftMode::Strict)
                .build()
                .expect("channel"),
        )
        .consent(FnConsent::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { ConsentDecision::Approve }
        }))
        .build()
        .expect("executor");
    (executor, asked)
}

async fn setup() -> (Upstream, Executor, Arc<AtomicU32>, tempfile::TempDir) {
    let upstream = Upstream::start(|_| Reply::Json(202, json!({"deployment_id": "dep_1"}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = Catalog::builder()
        .action::<CreateDeployment>()
        .action::<CreateDeploymentWithPriority>()
        .build()
        .expect("catalog");
    let (executor, asked) = executor_for(catalog, &upstream, &dir);
    (upstream, executor, asked, dir)
}

fn session() -> Session {
    Session::new("s").allow("project", ["proj_1"])
}

#[tokio::test]
async fn a_request_that_matches_the_operation_is_sent() {
    let (upstream, executor, asked, _dir) = setup().await;
    let result = executor
        .call(
            "create_deployment",
            json!({"project_id": "proj_1", "build_id": "build_7", "environment": "preview"}),
            &session(),
        )
        .await;
    assert_eq!(result.status, Status::Pending, "{}", result.to_json());
    assert_eq!(upstream.requests(), 1);
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_field_the_upstream_does_not_accept_is_refused_before_consent_and_never_sent() {
    let (upstream, executor, asked, _dir) = setup().await;
    let result = executor
        .call(
            "create_deployment_with_priority",
            json!({"project_id": "proj_1", "build_id": "build_7", "environment": "preview", "priority": 3}),
            &session(),
        )
        .await;
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(
        result.code.as_deref(),
        Some("invalid_request"),
        "{}",
        result.to_json()
    );
    assert_eq!(result.divergences.len(), 1, "{}", result.to_json());
    assert_eq!(result.divergences[0].kind.as_str(), "unknown_field");
    assert_eq!(result.divergences[0].path, "/body/priority");
    assert_eq!(upstream.requests(), 0);
    assert_eq!(
        asked.load(Ordering::SeqCst),
        0,
        "no human is asked about a request the API rejects"
    );
}

#[tokio::test]
async fn a_value_the_upstream_schema_forbids_is_refused_and_never_sent() {
    let (upstream, executor, _asked, _dir) = setup().await;
    let result = executor
        .call(
            "create_deployment",
            json!({"project_id": "proj_1", "build_id": "BUILD-7", "environment": "preview"}),
            &session(),
        )
        .await;
    assert_eq!(
        result.code.as_deref(),
        Some("invalid_request"),
        "{}",
        result.to_json()
    );
    assert_eq!(result.divergences[0].kind.as_str(), "constraint_violation");
    assert_eq!(upstream.requests(), 0);
}

/// The same operation from an action that does not send the idempotency key the API requires.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "create_deployment_without_key", effect = reversible_change)]
#[http(post = "/v1/projects/{project_id}/deployments", status(202) = pending)]
struct CreateDeploymentWithoutKey {
    #[scope(project)]
    project_id: String,
    build_id: String,
    environment: String,
}

#[tokio::test]
async fn an_action_that_omits_a_header_the_upstream_requires_is_refused_and_never_sent() {
    let upstream = Upstream::start(|_| Reply::Json(202, json!({}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = Catalog::builder()
        .action::<CreateDeploymentWithoutKey>()
        .build()
        .expect("catalog");
    let (executor, _asked) = executor_for(catalog, &upstream, &dir);
    let result = executor
        .call(
            "create_deployment_without_key",
            json!({"project_id": "proj_1", "build_id": "build_7", "environment": "preview"}),
            &session(),
        )
        .await;
    assert_eq!(result.code.as_deref(), Some("invalid_request"));
    assert_eq!(result.divergences.len(), 1, "{}", result.to_json());
    assert_eq!(result.divergences[0].kind.as_str(), "missing_required");
    assert_eq!(result.divergences[0].path, "/header/Idempotency-Key");
    assert_eq!(upstream.requests(), 0);
}
