//! An OpenAPI document attached to the HTTP channel: every outgoing request is checked against
//! its operation before consent, and a request the upstream's API would reject is never sent.
//! Given the catalog, the channel compiles every action's guard in `build()`: a document that
//! cannot check an action fails there, at start-up, before anything is sent.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use sallyport_core::code::RefusalCode;
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::drift::DriftMode;
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::Status;
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::{BuildError, HttpChannel};
use sallyport_openapi::{OpenApi, OpenApiError};
use sallyport_tests::http_server::{Reply, Upstream};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Queue one build for an environment.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "create_deployment", effect = reversible_change, retry = idempotency_key)]
#[http(post = "/v1/projects/{project_id}/deployments", status(202) = pending, result = ())]
struct CreateDeployment {
    #[scope(project)]
    project_id: String,
    build_id: String,
    environment: String,
}

/// The same operation, from an action that also sends a field the upstream does not accept.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "create_deployment_with_priority", effect = reversible_change, retry = idempotency_key)]
#[http(post = "/v1/projects/{project_id}/deployments", status(202) = pending, result = ())]
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
    let document = OpenApi::parse(include_str!(
        "../../../tests/fixtures/openapi/deployments.json"
    ))
    .expect("spec parses");
    let channel = HttpChannel::builder()
        .base_url(upstream.url())
        .openapi(document, DriftMode::Strict)
        .build()
        .expect("channel");
    executor_with(catalog, channel, dir)
}

/// An executor over `catalog` and `channel`, approving consent and counting how often it is
/// asked.
fn executor_with(
    catalog: Catalog,
    channel: HttpChannel,
    dir: &tempfile::TempDir,
) -> (Executor, Arc<AtomicU32>) {
    let asked = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&asked);
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .channel(channel)
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
        result.code,
        Some(RefusalCode::InvalidRequest.into()),
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
        result.code,
        Some(RefusalCode::InvalidRequest.into()),
        "{}",
        result.to_json()
    );
    assert_eq!(result.divergences[0].kind.as_str(), "constraint_violation");
    assert_eq!(upstream.requests(), 0);
}

/// The same operation from an action that does not send the idempotency key the API requires.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "create_deployment_without_key", effect = reversible_change)]
#[http(post = "/v1/projects/{project_id}/deployments", status(202) = pending, result = ())]
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
    assert_eq!(result.code, Some(RefusalCode::InvalidRequest.into()));
    assert_eq!(result.divergences.len(), 1, "{}", result.to_json());
    assert_eq!(result.divergences[0].kind.as_str(), "missing_required");
    assert_eq!(result.divergences[0].path, "/header/Idempotency-Key");
    assert_eq!(upstream.requests(), 0);
}

/// The deployments document with `DeploymentBase` (part of `createDeployment`'s body) made to
/// refer to itself through `allOf`.
fn self_referencing_deployments() -> OpenApi {
    let mut doc: Value = serde_json::from_str(include_str!(
        "../../../tests/fixtures/openapi/deployments.json"
    ))
    .expect("json");
    doc["components"]["schemas"]["DeploymentBase"]["allOf"] =
        json!([{"$ref": "#/components/schemas/DeploymentBase"}]);
    OpenApi::from_value(doc).expect("parses")
}

const SELF_REFERENCE: &str = "the schema at /paths/~1v1~1projects~1{project_id}~1deployments/post/requestBody/content/application~1json/schema \
    cannot be checked: it refers back to itself without descending into the value \
    (/components/schemas/DeploymentBase -> /components/schemas/DeploymentBase/allOf/0 -> /components/schemas/DeploymentBase)";

#[tokio::test]
async fn a_guard_that_cannot_be_compiled_fails_the_channel_build_and_nothing_is_sent() {
    let upstream = Upstream::start(|_| Reply::Json(202, json!({"deployment_id": "dep_1"}))).await;
    let catalog = Catalog::builder()
        .action::<CreateDeployment>()
        .build()
        .expect("catalog");
    // A document that has the operation but cannot check it fails in every mode.
    for mode in [DriftMode::Strict, DriftMode::Warn, DriftMode::Shadow] {
        let err = HttpChannel::builder()
            .base_url(upstream.url())
            .openapi(self_referencing_deployments(), mode)
            .catalog(&catalog)
            .build()
            .expect_err("the build fails");
        match &err {
            BuildError::OpenApi { action, source } => {
                assert_eq!(action, "create_deployment");
                assert!(matches!(source, OpenApiError::Cycle { .. }), "{source:?}");
            }
            other => panic!("expected an OpenAPI build error, got {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            "the OpenAPI document cannot check action `create_deployment`"
        );
        assert_eq!(
            std::error::Error::source(&err).map(ToString::to_string),
            Some(SELF_REFERENCE.to_owned())
        );
    }
    assert_eq!(upstream.requests(), 0);
}

#[tokio::test]
async fn without_the_catalog_a_self_referencing_schema_is_refused_at_the_first_call_and_nothing_is_sent()
 {
    let upstream = Upstream::start(|_| Reply::Json(202, json!({"deployment_id": "dep_1"}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = Catalog::builder()
        .action::<CreateDeployment>()
        .build()
        .expect("catalog");
    let channel = HttpChannel::builder()
        .base_url(upstream.url())
        .openapi(self_referencing_deployments(), DriftMode::Strict)
        .build()
        .expect("no guard is compiled without the catalog");
    let (executor, asked) = executor_with(catalog, channel, &dir);
    let result = executor
        .call(
            "create_deployment",
            json!({"project_id": "proj_1", "build_id": "build_7", "environment": "preview"}),
            &session(),
        )
        .await;
    assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
    assert_eq!(result.code, Some(RefusalCode::InvalidRequest.into()));
    assert_eq!(
        result.reason.as_deref(),
        Some(
            format!(
                "the upstream's OpenAPI operation POST /v1/projects/{{project_id}}/deployments cannot be checked: {SELF_REFERENCE}"
            )
            .as_str()
        )
    );
    assert_eq!(upstream.requests(), 0);
    assert_eq!(asked.load(Ordering::SeqCst), 0);
}

/// An action the deployments document has no operation for.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "archive_project", effect = reversible_change)]
#[http(post = "/v1/projects/{project_id}/archive", status(202) = pending, result = ())]
struct ArchiveProject {
    #[scope(project)]
    project_id: String,
}

#[tokio::test]
async fn an_action_missing_from_the_document_fails_a_strict_build_and_is_sent_unchecked_in_warn_mode()
 {
    let upstream = Upstream::start(|_| Reply::Json(202, json!({}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = Catalog::builder()
        .action::<CreateDeployment>()
        .action::<ArchiveProject>()
        .build()
        .expect("catalog");
    let document = || {
        OpenApi::parse(include_str!(
            "../../../tests/fixtures/openapi/deployments.json"
        ))
        .expect("spec parses")
    };
    let err = HttpChannel::builder()
        .base_url(upstream.url())
        .openapi(document(), DriftMode::Strict)
        .catalog(&catalog)
        .build()
        .expect_err("strict: every action needs its operation");
    assert_eq!(
        err.to_string(),
        "the OpenAPI document cannot check action `archive_project`"
    );
    assert_eq!(
        std::error::Error::source(&err).map(ToString::to_string),
        Some(
            "no operation POST /v1/projects/{project_id}/archive in the OpenAPI document"
                .to_owned()
        )
    );
    let channel = HttpChannel::builder()
        .base_url(upstream.url())
        .openapi(document(), DriftMode::Warn)
        .catalog(&catalog)
        .build()
        .expect("warn: an action without an operation is sent unchecked");
    let (executor, _asked) = executor_with(catalog, channel, &dir);
    let result = executor
        .call(
            "archive_project",
            json!({"project_id": "proj_1"}),
            &session(),
        )
        .await;
    assert_eq!(result.status, Status::Pending, "{}", result.to_json());
    assert_eq!(upstream.requests(), 1);
}

/// GitHub's REST API description, `@octokit/openapi` 23.0.2 (see the fixture's README).
fn github() -> OpenApi {
    let path = format!(
        "{}/../tests/fixtures/openapi/github/api.github.com.json.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).expect("fixture"))
        .read_to_string(&mut text)
        .expect("gzip");
    OpenApi::parse(&text).expect("the GitHub description parses")
}

/// Open an issue in a repository.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "open_issue", effect = reversible_change)]
#[http(post = "/repos/{owner}/{repo}/issues", status(201) = completed, result = ())]
struct OpenIssue {
    owner: String,
    #[scope(repository)]
    repo: String,
    title: String,
    body: String,
}

/// The same operation, from an action that sends `labels` as one string (GitHub takes a list).
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "open_labelled_issue", effect = reversible_change)]
#[http(post = "/repos/{owner}/{repo}/issues", status(201) = completed, result = ())]
struct OpenLabelledIssue {
    owner: String,
    #[scope(repository)]
    repo: String,
    title: String,
    labels: String,
}

#[tokio::test]
async fn the_channel_compiles_githubs_guards_at_build_and_checks_each_call_against_them() {
    let upstream = Upstream::start(|_| Reply::Json(201, json!({"number": 1347}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = Catalog::builder()
        .action::<OpenIssue>()
        .action::<OpenLabelledIssue>()
        .build()
        .expect("catalog");
    let channel = HttpChannel::builder()
        .base_url(upstream.url())
        .openapi(github(), DriftMode::Strict)
        .catalog(&catalog)
        .build()
        .expect("both actions have an operation that compiles");
    let (executor, asked) = executor_with(catalog, channel, &dir);
    let session = Session::new("s").allow("repository", ["hello-world"]);
    let result = executor
        .call(
            "open_issue",
            json!({"owner": "octocat", "repo": "hello-world", "title": "Found a bug", "body": "It crashes."}),
            &session,
        )
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(upstream.requests(), 1);
    let result = executor
        .call(
            "open_labelled_issue",
            json!({"owner": "octocat", "repo": "hello-world", "title": "Found a bug", "labels": "bug"}),
            &session,
        )
        .await;
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(
        result.code,
        Some(RefusalCode::InvalidRequest.into()),
        "{}",
        result.to_json()
    );
    assert_eq!(result.divergences.len(), 1, "{}", result.to_json());
    assert_eq!(result.divergences[0].kind.as_str(), "type_mismatch");
    assert_eq!(result.divergences[0].path, "/body/labels");
    assert_eq!(result.divergences[0].expected, "array");
    assert_eq!(upstream.requests(), 1, "the refused call sent nothing");
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}
