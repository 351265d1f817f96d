//! Outgoing HTTP requests against real-world-shaped OpenAPI documents (a petstore-like 3.0
//! YAML spec and a deployments 3.1 JSON spec, both with shared parameters, `$ref`ed request
//! bodies, nested and cyclic schemas and `allOf`), including what a shallow validator misses;
//! the action/upstream compatibility check; the spec hash as provenance; GitHub's whole REST
//! API description (1,223 operations) compiled and checked; and schemas that refer back to
//! themselves refused with an error rather than a stack overflow.

use sallyport_core::catalog::Provenance;
use sallyport_core::drift::{
    Baseline, BaselineGuard, Divergence, DivergenceKind, DriftMode, DriftStatus, ReasonCode,
    Verdict,
};
use sallyport_core::target::{HttpBody, HttpMethod, HttpTarget, Target};
use sallyport_core::{Action, Catalog};
use sallyport_openapi::{
    CompatibilityIssue, CompatibilityKind, OpenApi, OperationGuard, OperationSelector,
    OutgoingRequest, check_action, check_catalog,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::io::Read;
use std::time::Instant;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../tests/fixtures/openapi/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture")
}

fn petstore() -> OpenApi {
    OpenApi::parse(&fixture("petstore.yaml")).expect("petstore parses")
}

fn deployments() -> OpenApi {
    OpenApi::parse(&fixture("deployments.json")).expect("deployments parses")
}

fn op(spec: &OpenApi, id: &str) -> OperationGuard {
    spec.operation(&OperationSelector::id(id))
        .expect("operation")
}

fn d(kind: DivergenceKind, path: &str, expected: &str, observed: &str) -> Divergence {
    Divergence {
        kind,
        path: path.to_owned(),
        expected: expected.to_owned(),
        observed: observed.to_owned(),
    }
}

fn headers(request_id: &str) -> Vec<(String, String)> {
    vec![("x-request-id".to_owned(), request_id.to_owned())]
}

/// Strict-mode divergences of a request.
fn divergences(guard: &OperationGuard, request: &OutgoingRequest<'_>) -> Vec<Divergence> {
    guard.check(DriftMode::Strict, request).divergences
}

use DivergenceKind::{ConstraintViolation, MissingRequired, TypeMismatch, UnknownField};

#[test]
fn yaml_and_json_of_one_document_have_one_hash() {
    // petstore.json is petstore.yaml converted to JSON.
    let from_json = OpenApi::parse(&fixture("petstore.json")).expect("parses");
    assert_eq!(from_json.hash(), petstore().hash());
    assert_eq!(petstore().hash().len(), 64);
    assert_eq!(petstore().version(), "3.0.3");
    assert_ne!(petstore().hash(), deployments().hash());
    let err = OpenApi::parse("swagger: '2.0'\ninfo: {}\n").expect_err("not OpenAPI 3");
    assert_eq!(
        err.to_string(),
        "not an OpenAPI 3.0 or 3.1 document (openapi: )"
    );
}

#[test]
fn a_valid_create_pet_request_is_clean() {
    let guard = op(&petstore(), "createPet");
    let h = headers("0123abcd-ef");
    let body = json!({"name": "Rex", "tag": null, "category": {"id": 3, "parent": {"id": 1}}});
    let decision = guard.check(
        DriftMode::Strict,
        &OutgoingRequest::new("POST", "/pets")
            .with_headers(&h)
            .with_body(&body),
    );
    assert_eq!(
        decision.verdict,
        Verdict::Clean,
        "{:?}",
        decision.divergences
    );
    assert!(decision.allowed);
    assert_eq!(guard.method(), "POST");
    assert_eq!(guard.path(), "/pets");
}

#[test]
fn an_unknown_field_is_caught_where_additional_properties_is_false_only_inside_a_ref() {
    // NewPet itself allows extra fields; Category (reached through $ref) does not, and
    // neither does its cyclic `parent`.
    let guard = op(&petstore(), "createPet");
    let h = headers("0123abcd-ef");
    let body = json!({"name": "Rex", "nickname": "ok at the top level",
        "category": {"id": 3, "colour": "brown", "parent": {"id": 1, "parent": {"id": 2, "owner": "x"}}}});
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("POST", "/pets")
                .with_headers(&h)
                .with_body(&body)
        ),
        [
            d(
                UnknownField,
                "/body/category/colour",
                "no such field; known fields: id, name, parent",
                "string"
            ),
            d(
                UnknownField,
                "/body/category/parent/parent/owner",
                "no such field; known fields: id, name, parent",
                "string"
            ),
        ]
    );
}

#[test]
fn a_path_parameter_of_the_wrong_type_is_a_type_mismatch() {
    let guard = op(&petstore(), "showPetById");
    assert_eq!(
        divergences(&guard, &OutgoingRequest::new("GET", "/pets/rex")),
        [d(TypeMismatch, "/path/petId", "integer", "string")]
    );
    assert_eq!(
        divergences(&guard, &OutgoingRequest::new("GET", "/pets/0")),
        [d(
            ConstraintViolation,
            "/path/petId",
            "a number >= 1",
            "integer"
        )]
    );
    assert_eq!(
        divergences(&guard, &OutgoingRequest::new("GET", "/pets/42")),
        []
    );
    assert_eq!(
        divergences(&guard, &OutgoingRequest::new("GET", "/pets/42/toys")),
        [d(
            ConstraintViolation,
            "/path",
            "a path matching /pets/{petId}",
            "string"
        )]
    );
}

#[test]
fn query_and_header_parameters_are_typed_constrained_and_required() {
    let guard = op(&petstore(), "listPets");
    let ok_headers = headers("0123abcd-ef");
    let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let good = q(&[("limit", "20"), ("tags", "dog,cat")]);
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("GET", "/pets")
                .with_query(&good)
                .with_headers(&ok_headers)
        ),
        []
    );

    let bad = q(&[("limit", "500"), ("verbose", "1")]);
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("GET", "/pets")
                .with_query(&bad)
                .with_headers(&ok_headers)
        ),
        [
            d(
                ConstraintViolation,
                "/query/limit",
                "a number <= 100",
                "integer"
            ),
            d(
                UnknownField,
                "/query/verbose",
                "no such query parameter",
                "string"
            ),
        ]
    );
    let wrong = q(&[("limit", "ten")]);
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("GET", "/pets").with_query(&wrong)
        ),
        [
            d(
                MissingRequired,
                "/header/X-Request-Id",
                "a value (the parameter is required)",
                "absent"
            ),
            d(TypeMismatch, "/query/limit", "integer", "string"),
        ]
    );
    let bad_header = headers("NOT A REQUEST ID");
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("GET", "/pets").with_headers(&bad_header)
        ),
        [d(
            ConstraintViolation,
            "/header/X-Request-Id",
            "a string matching ^[a-f0-9-]{8,64}$",
            "string"
        )]
    );
}

#[test]
fn body_fields_are_required_and_typed_through_refs() {
    let guard = op(&petstore(), "createPet");
    let h = headers("0123abcd-ef");
    let body = json!({"name": 5, "category": {"id": "three"}});
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("POST", "/pets")
                .with_headers(&h)
                .with_body(&body)
        ),
        [
            d(TypeMismatch, "/body/category/id", "integer", "string"),
            d(TypeMismatch, "/body/name", "string", "integer"),
        ]
    );
    let missing = json!({"tag": "x"});
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("POST", "/pets")
                .with_headers(&h)
                .with_body(&missing)
        ),
        [
            d(
                MissingRequired,
                "/body/category",
                "a value (the field is required)",
                "absent"
            ),
            d(
                MissingRequired,
                "/body/name",
                "a value (the field is required)",
                "absent"
            ),
        ]
    );
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("POST", "/pets").with_headers(&h)
        ),
        [d(
            MissingRequired,
            "/body",
            "a JSON body (the request body is required)",
            "absent"
        )]
    );
    let show = op(&petstore(), "showPetById");
    let stray = json!({});
    assert_eq!(
        divergences(
            &show,
            &OutgoingRequest::new("GET", "/pets/1").with_body(&stray)
        ),
        [d(UnknownField, "/body", "no request body", "object")]
    );
}

#[test]
fn all_of_and_enums_are_checked_in_an_openapi_30_update() {
    let guard = op(&petstore(), "updatePet");
    let h = headers("0123abcd-ef");
    let body = json!({"name": "", "status": "adopted", "tag": null});
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("PATCH", "/pets/7")
                .with_headers(&h)
                .with_body(&body)
        ),
        [
            d(
                ConstraintViolation,
                "/body/name",
                "at least 1 characters",
                "string"
            ),
            d(
                ConstraintViolation,
                "/body/status",
                "one of [\"available\",\"pending\",\"sold\"]",
                "string"
            ),
        ]
    );
}

#[test]
fn openapi_31_all_of_with_unevaluated_properties_and_a_cyclic_closed_schema() {
    let guard = op(&deployments(), "createDeployment");
    let h = vec![(
        "Idempotency-Key".to_owned(),
        "0b6f2f3e-8f8a-4a8e-9d59-0d7a1f3c2b11".to_owned(),
    )];
    let ok = json!({"environment": "preview", "build_id": "build_42", "reason": null,
        "config": {"replicas": 2, "env": {"A": "1"}, "overrides": {"replicas": 1}}});
    let path = "/v1/projects/proj_1/deployments";
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("POST", path)
                .with_headers(&h)
                .with_body(&ok)
        ),
        []
    );

    let bad = json!({"environment": "production", "build_id": "build_42", "priority": "high",
        "config": {"replicas": "2", "overrides": {"overrides": {"colour": "red"}}}});
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("POST", "/v1/projects/PROJ-1/deployments").with_body(&bad)
        ),
        [
            d(
                UnknownField,
                "/body/config/overrides/overrides/colour",
                "no such field; known fields: env, overrides, replicas",
                "string"
            ),
            d(TypeMismatch, "/body/config/replicas", "integer", "string"),
            d(
                ConstraintViolation,
                "/body/environment",
                "one of [\"preview\",\"staging\"]",
                "string"
            ),
            d(UnknownField, "/body/priority", "no such field", "string"),
            d(
                MissingRequired,
                "/header/Idempotency-Key",
                "a value (the parameter is required)",
                "absent"
            ),
            d(
                ConstraintViolation,
                "/path/project_id",
                "a string matching ^proj_[a-z0-9]+$",
                "string"
            ),
        ]
    );
    let bad_key = vec![("idempotency-key".to_owned(), "not-a-uuid".to_owned())];
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("POST", path)
                .with_headers(&bad_key)
                .with_body(&ok)
        ),
        [d(
            ConstraintViolation,
            "/header/Idempotency-Key",
            "a string in `uuid` format",
            "string"
        )]
    );
}

#[test]
fn warn_and_shadow_allow_and_record_what_strict_denies() {
    let guard = op(&petstore(), "showPetById");
    let request = OutgoingRequest::new("GET", "/pets/rex");
    let strict = guard.check(DriftMode::Strict, &request);
    let warn = guard.check(DriftMode::Warn, &request);
    let shadow = guard.check(DriftMode::Shadow, &request);
    assert_eq!((strict.allowed, strict.verdict), (false, Verdict::Denied));
    assert_eq!((warn.allowed, warn.verdict), (true, Verdict::Warned));
    assert_eq!((shadow.allowed, shadow.verdict), (true, Verdict::Shadowed));
    let expected = [d(TypeMismatch, "/path/petId", "integer", "string")];
    assert_eq!(strict.divergences, expected);
    assert_eq!(warn.divergences, expected);
    assert_eq!(shadow.divergences, expected);
    assert_eq!(strict.action, "GET /pets/{petId}");
    assert_eq!(
        strict.detail,
        "the request does not match the upstream operation: type_mismatch at /path/petId: expected integer, found string"
    );
}

#[test]
fn operations_are_found_by_id_or_by_route_with_any_placeholder_names() {
    let spec = deployments();
    let by_route = spec
        .operation(&OperationSelector::route(
            "get",
            "/v1/projects/{p}/deployments/{d}",
        ))
        .expect("found by route");
    assert_eq!(by_route.operation_id(), Some("getDeployment"));
    let err = spec
        .operation(&OperationSelector::id("deleteDeployment"))
        .expect_err("missing");
    assert_eq!(
        err.to_string(),
        "no operation operationId `deleteDeployment` in the OpenAPI document"
    );
}

/// Queue one build for deployment.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "create_deployment", effect = external_commitment)]
#[channel(name = "upstream")]
#[allow(dead_code)]
struct CreateDeployment {
    #[scope(project)]
    project_id: String,
    build_id: u64,
    priority: String,
    /// Why.
    #[audit_note]
    reason: String,
}

/// Read one deployment.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_deployment", effect = observe)]
#[channel(name = "upstream")]
#[allow(dead_code)]
struct GetDeployment {
    #[scope(project)]
    project_id: String,
    deployment_id: String,
}

/// List the deployments of a project.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "list_deployments", effect = observe)]
#[channel(name = "upstream")]
#[allow(dead_code)]
struct ListDeployments {
    #[scope(project)]
    project_id: String,
    limit: Option<String>,
    page: Option<u32>,
}

fn http(method: HttpMethod, path: &'static str) -> HttpTarget {
    HttpTarget::new(method, path)
}

fn http_catalog(spec_hash: Option<&str>) -> Catalog {
    let mut builder = Catalog::builder()
        .provenance(Provenance::new("2.0.0"))
        .action_with_spec::<CreateDeployment>(|s| {
            s.with_target(Target::Http(
                http(HttpMethod::Post, "/v1/projects/{project_id}/deployments")
                    .with_omitted("reason"),
            ))
        })
        .action_with_spec::<GetDeployment>(|s| {
            s.with_target(Target::Http(http(
                HttpMethod::Get,
                "/v1/projects/{project_id}/deployments/{deployment_id}",
            )))
        })
        .action_with_spec::<ListDeployments>(|s| {
            s.with_target(Target::Http(
                http(HttpMethod::Get, "/v1/projects/{project_id}/deployments")
                    .with_query("limit")
                    .with_query("page")
                    .with_body(HttpBody::Empty),
            ))
        });
    if let Some(hash) = spec_hash {
        builder = builder
            .upstream_spec::<CreateDeployment>(hash)
            .upstream_spec::<GetDeployment>(hash)
            .upstream_spec::<ListDeployments>(hash);
    }
    builder.build().expect("catalog")
}

fn issue(kind: CompatibilityKind, location: &str, detail: &str) -> CompatibilityIssue {
    serde_json::from_value(json!({"kind": kind, "location": location, "detail": detail}))
        .expect("issue")
}

#[test]
fn the_compatibility_check_reports_what_would_fail_upstream() {
    let spec = deployments();
    let reports = check_catalog(&spec, &http_catalog(None));
    assert_eq!(
        reports
            .iter()
            .map(|r| (r.action.as_str(), r.operation.as_deref()))
            .collect::<Vec<_>>(),
        [
            (
                "create_deployment",
                Some("POST /v1/projects/{project_id}/deployments")
            ),
            (
                "get_deployment",
                Some("GET /v1/projects/{project_id}/deployments/{deployment_id}")
            ),
            (
                "list_deployments",
                Some("GET /v1/projects/{project_id}/deployments")
            ),
        ]
    );
    assert_eq!(
        reports[0].issues,
        [
            issue(
                CompatibilityKind::TypeChanged,
                "/body/build_id",
                "the action sends integer; the upstream expects string"
            ),
            issue(
                CompatibilityKind::UpstreamRequiresField,
                "/body/environment",
                "the upstream requires body field `environment`, which the action never sends"
            ),
            issue(
                CompatibilityKind::UpstreamRemovedField,
                "/body/priority",
                "the action sends body field `priority`, which the upstream does not declare"
            ),
            issue(
                CompatibilityKind::UpstreamRequiresField,
                "/header/Idempotency-Key",
                "the upstream requires header parameter `Idempotency-Key`, which the action never sends"
            ),
        ]
    );
    assert!(reports[1].is_compatible(), "{:?}", reports[1].issues);
    assert_eq!(
        reports[2].issues,
        [
            issue(
                CompatibilityKind::TypeChanged,
                "/query/limit",
                "the action sends string; the upstream expects integer"
            ),
            issue(
                CompatibilityKind::UpstreamRemovedField,
                "/query/page",
                "the action sends query parameter `page`, which the upstream does not declare"
            ),
        ]
    );
    let catalog = http_catalog(None);
    let missing = check_action(
        &spec,
        catalog.get("get_deployment").expect("entry"),
        &OperationSelector::id("cancelDeployment"),
    );
    assert_eq!(missing.operation, None);
    assert_eq!(
        missing.issues,
        [issue(
            CompatibilityKind::OperationMissing,
            "/",
            "the upstream has no operation operationId `cancelDeployment`"
        )]
    );
}

#[test]
fn a_changed_upstream_spec_is_provenance_changed() {
    let v1 = deployments();
    let mut doc: Value = serde_json::from_str(&fixture("deployments.json")).expect("json");
    doc["components"]["schemas"]["DeploymentBase"]["required"] = json!(["environment", "config"]);
    let v2 = OpenApi::from_value(doc).expect("v2");
    assert_ne!(v1.hash(), v2.hash());
    let approved = http_catalog(Some(v1.hash()));
    let live = http_catalog(Some(v2.hash()));
    let guard = BaselineGuard::new(&live, Baseline::from_catalog(&approved));
    for name in ["create_deployment", "get_deployment", "list_deployments"] {
        let decision = guard.decision(name).expect("decision");
        assert_eq!(decision.reasons, [ReasonCode::ProvenanceChanged], "{name}");
        assert_eq!(decision.drift_status, DriftStatus::ReviewRequired);
        assert_eq!(decision.changes.len(), 1);
        assert_eq!(decision.changes[0].field, "/provenance/upstream_spec_hash");
        assert_eq!(decision.changes[0].before, json!(v1.hash()));
        assert_eq!(decision.changes[0].after, json!(v2.hash()));
    }
}

/// GitHub's REST API description, `@octokit/openapi` 23.0.2 (see the fixture's README).
fn github_text() -> String {
    let path = format!(
        "{}/../tests/fixtures/openapi/github/api.github.com.json.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).expect("fixture"))
        .read_to_string(&mut text)
        .expect("gzip");
    text
}

fn github() -> OpenApi {
    OpenApi::parse(&github_text()).expect("the GitHub description parses")
}

#[test]
fn every_operation_of_githubs_description_compiles() {
    let text = github_text();
    let doc: Value = serde_json::from_str(&text).expect("json");
    let spec = OpenApi::parse(&text).expect("parses");
    assert_eq!(spec.version(), "3.0.3");
    let mut ids = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            if let Some(id) = op.get("operationId").and_then(Value::as_str) {
                ids.push((id.to_owned(), method.clone(), path.clone()));
            }
        }
    }
    assert_eq!(ids.len(), 1_223);
    let start = Instant::now();
    let mut failures = Vec::new();
    for (id, method, path) in &ids {
        match spec.operation(&OperationSelector::id(id.as_str())) {
            Ok(guard) => {
                assert_eq!(guard.operation_id(), Some(id.as_str()));
                assert_eq!(guard.method(), method.to_uppercase());
                assert_eq!(guard.path(), path);
            }
            Err(e) => failures.push(format!("{id}: {e}")),
        }
    }
    eprintln!(
        "compiled {} GitHub operations in {:.2?}",
        ids.len(),
        start.elapsed()
    );
    assert_eq!(failures, Vec::<String>::new());
    // By route as well, with placeholder names of the action's own.
    let by_route = spec
        .operation(&OperationSelector::route("post", "/repos/{o}/{r}/issues"))
        .expect("by route");
    assert_eq!(by_route.operation_id(), Some("issues/create"));
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn real_github_requests_are_accepted_and_a_wrong_body_is_refused_with_its_divergences() {
    let spec = github();
    let issues = op(&spec, "issues/create");
    let path = "/repos/octocat/hello-world/issues";
    let good = json!({"title": "Found a bug", "body": "It crashes on start.",
        "labels": ["bug", {"name": "p1"}], "assignees": ["octocat"], "milestone": 3});
    let decision = issues.check(
        DriftMode::Strict,
        &OutgoingRequest::new("POST", path).with_body(&good),
    );
    assert_eq!(
        (decision.allowed, decision.verdict),
        (true, Verdict::Clean),
        "{:?}",
        decision.divergences
    );
    let bad = json!({"body": "no title", "labels": "bug", "assignees": [7]});
    assert_eq!(
        divergences(&issues, &OutgoingRequest::new("POST", path).with_body(&bad)),
        [
            d(TypeMismatch, "/body/assignees/0", "string", "integer"),
            d(TypeMismatch, "/body/labels", "array", "string"),
            d(
                MissingRequired,
                "/body/title",
                "a value (the field is required)",
                "absent"
            ),
        ]
    );
    assert_eq!(
        divergences(&issues, &OutgoingRequest::new("POST", path)),
        [d(
            MissingRequired,
            "/body",
            "a JSON body (the request body is required)",
            "absent"
        )]
    );

    let create_repo = op(&spec, "repos/create-for-authenticated-user");
    let body = json!({"name": "hello", "private": "yes", "squash_merge_commit_title": "TITLE"});
    assert_eq!(
        divergences(
            &create_repo,
            &OutgoingRequest::new("POST", "/user/repos").with_body(&body)
        ),
        [
            d(TypeMismatch, "/body/private", "boolean", "string"),
            d(
                ConstraintViolation,
                "/body/squash_merge_commit_title",
                "one of [\"PR_TITLE\",\"COMMIT_OR_PR_TITLE\"]",
                "string"
            ),
        ]
    );

    let alerts = op(&spec, "secret-scanning/list-alerts-for-repo");
    let path = "/repos/octocat/hello-world/secret-scanning/alerts";
    let good = pairs(&[("state", "open"), ("per_page", "50")]);
    assert_eq!(
        divergences(
            &alerts,
            &OutgoingRequest::new("GET", path).with_query(&good)
        ),
        []
    );
    let bad = pairs(&[("state", "bogus"), ("per_page", "lots"), ("colour", "red")]);
    assert_eq!(
        divergences(&alerts, &OutgoingRequest::new("GET", path).with_query(&bad)),
        [
            d(
                UnknownField,
                "/query/colour",
                "no such query parameter",
                "string"
            ),
            d(TypeMismatch, "/query/per_page", "integer", "string"),
            d(
                ConstraintViolation,
                "/query/state",
                "one of [\"open\",\"resolved\"]",
                "string"
            ),
        ]
    );
}

/// A document whose `createThing` body is `Thing`, with `schemas` as its component schemas.
fn looping(schemas: &Value) -> OpenApi {
    OpenApi::from_value(json!({
        "openapi": "3.0.3",
        "info": {"title": "loops", "version": "1"},
        "paths": {"/things": {"post": {
            "operationId": "createThing",
            "requestBody": {"content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Thing"}}}},
            "responses": {"201": {"description": "created"}}
        }}},
        "components": {"schemas": schemas}
    }))
    .expect("document")
}

#[test]
fn a_self_referencing_all_of_is_refused_with_an_error_not_a_stack_overflow() {
    let spec = looping(&json!({
        "Thing": {"type": "object", "allOf": [{"$ref": "#/components/schemas/Thing"}]}
    }));
    let err = spec
        .operation(&OperationSelector::id("createThing"))
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "the schema at /paths/~1things/post/requestBody/content/application~1json/schema cannot \
         be checked: it refers back to itself without descending into the value \
         (/components/schemas/Thing -> /components/schemas/Thing/allOf/0 -> /components/schemas/Thing)"
    );
    // The same by route, and for a loop through two schemas and `anyOf`.
    let spec = looping(&json!({
        "Thing": {"anyOf": [{"type": "string"}, {"$ref": "#/components/schemas/Other"}]},
        "Other": {"allOf": [{"$ref": "#/components/schemas/Thing"}]}
    }));
    let err = spec
        .operation(&OperationSelector::route("POST", "/things"))
        .expect_err("refused");
    assert!(
        err.to_string().ends_with(
            "(/components/schemas/Thing -> /components/schemas/Thing/anyOf/1 -> \
             /components/schemas/Other -> /components/schemas/Other/allOf/0 -> \
             /components/schemas/Thing)"
        ),
        "{err}"
    );
}

#[test]
fn a_recursive_schema_that_descends_into_the_value_still_checks() {
    let spec = looping(&json!({
        "Thing": {"type": "object", "required": ["name"], "additionalProperties": false,
            "properties": {"name": {"type": "string"},
                "parts": {"type": "array", "items": {"$ref": "#/components/schemas/Thing"}}}}
    }));
    let guard = op(&spec, "createThing");
    let body = json!({"name": "a", "parts": [{"name": "b", "parts": [{"size": 1}]}]});
    assert_eq!(
        divergences(
            &guard,
            &OutgoingRequest::new("POST", "/things").with_body(&body)
        ),
        [
            d(
                MissingRequired,
                "/body/parts/0/parts/0/name",
                "a value (the field is required)",
                "absent"
            ),
            d(
                UnknownField,
                "/body/parts/0/parts/0/size",
                "no such field; known fields: name, parts",
                "integer"
            ),
        ]
    );
}
