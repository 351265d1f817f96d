//! `sallyport scaffold` on GitHub's published OpenAPI description (the `@octokit/openapi`
//! fixture, 1,223 operations): the committed module `examples/src/github.rs` is exactly what
//! the generator writes for twelve operations, with only the `choose` decisions made by hand
//! (so a change in the generator shows here); and the generated actions, run through a real
//! executor whose HTTP channel checks every request against the same document (strict), reach
//! a local server that checks each request against the document again and answers with a body
//! built from the operation's success schema.

use std::io::Read;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::drift::DriftMode;
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::Status;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Executor, Session};
use sallyport_http::HttpChannel;
use sallyport_openapi::{OpenApi, OperationGuard, OperationSelector, OutgoingRequest};
use sallyport_scaffold::{Decision, Scaffold};
use sallyport_tests::http_server::{Received, Reply, Upstream};
use serde_json::{Map, Value, json};

#[allow(
    dead_code,
    unreachable_pub,
    reason = "the example module is public API of the examples crate; this test uses part of it"
)]
#[path = "../../../examples/src/github.rs"]
mod github;

/// The operations `examples/src/github.rs` was generated from, in its order.
const OPERATIONS: [&str; 12] = [
    "issues/create",
    "issues/get",
    "issues/update",
    "issues/list-for-repo",
    "issues/create-comment",
    "issues/list-comments",
    "pulls/list",
    "pulls/get",
    "pulls/create",
    "repos/get",
    "repos/create-release",
    "repos/get-release",
];

/// The credential the module binds (GitHub's document declares no security scheme).
const CREDENTIAL: &str = "github";

fn github_document() -> &'static OpenApi {
    static DOCUMENT: OnceLock<OpenApi> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/openapi/github/api.github.com.json.gz"
        );
        let file = std::fs::File::open(path).expect("fixture");
        let mut text = String::new();
        flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .expect("gunzip");
        OpenApi::parse(&text).expect("GitHub's description parses")
    })
}

/// A decision line the author may change: `choose` in the generated text, one of the
/// decision's words in the committed one.
fn decided(generated: &str, committed: &str) -> Option<Decision> {
    [Decision::Effect, Decision::Consent, Decision::Retry]
        .into_iter()
        .find(|decision| {
            generated == format!("    {decision} = choose,")
                && decision
                    .choices()
                    .iter()
                    .any(|word| committed == format!("    {decision} = {word},"))
        })
}

#[test]
fn the_committed_github_module_is_what_the_generator_writes_with_only_the_decisions_made() {
    let generated = Scaffold::new(github_document())
        .operations(OPERATIONS)
        .credential(CREDENTIAL)
        .generate();
    assert_eq!(generated.unsupported, []);
    assert_eq!(generated.actions.len(), 12);
    for action in &generated.actions {
        assert_eq!(
            action.open_decisions,
            [Decision::Effect, Decision::Consent, Decision::Retry],
            "GitHub's document states no consequence: every decision is the author's"
        );
    }
    let committed = include_str!("../../../examples/src/github.rs");
    // The generator's output, for a diff when this test fails.
    let fresh = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("github.generated.rs");
    std::fs::write(&fresh, &generated.code).expect("write the generated module");
    let generated_lines: Vec<&str> = generated.code.lines().collect();
    let committed_lines: Vec<&str> = committed.lines().collect();
    assert_eq!(
        generated_lines.len(),
        committed_lines.len(),
        "examples/src/github.rs no longer matches the generator (its output is in {}): regenerate it and make the decisions again",
        fresh.display()
    );
    let mut decisions = 0;
    for (n, (g, c)) in generated_lines.iter().zip(&committed_lines).enumerate() {
        if g == c {
            assert!(
                !g.ends_with("= choose,"),
                "line {}: a decision is still open in the committed module",
                n + 1
            );
            continue;
        }
        assert!(
            decided(g, c).is_some(),
            "examples/src/github.rs line {} differs from the generator's output ({}):\n  generated: {g}\n  committed: {c}",
            n + 1,
            fresh.display()
        );
        decisions += 1;
    }
    assert_eq!(
        decisions, 36,
        "three decisions per action, all made by hand"
    );
}

#[test]
fn operations_the_generator_cannot_express_in_githubs_description_are_reported() {
    let generated = Scaffold::new(github_document())
        .operations([
            "issues/add-labels",
            "repos/upload-release-asset",
            "issues/get",
        ])
        .generate();
    let reasons: Vec<String> = generated
        .unsupported
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        reasons,
        [
            "issues/add-labels: its JSON body: it is a `oneOf` of several object shapes",
            "repos/upload-release-asset: its request body is application/octet-stream, not JSON; the HTTP channel sends JSON bodies",
        ]
    );
    assert_eq!(generated.actions.len(), 1);
    // Without --credential, GitHub's document (no security schemes) binds none, and says so.
    assert!(generated.code.contains(
        "    // The document names no security scheme: add `credential = \"…\"` if the API needs one.\n"
    ));
}

/// A value that satisfies `schema` (its required properties, enum's first value, one item
/// per array), as a server built from the document would answer.
fn sample(root: &Value, schema: &Value, depth: usize) -> Value {
    let mut schema = schema;
    for _ in 0..32 {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => schema = root.pointer(&r[1..]).expect("local $ref"),
            None => break,
        }
    }
    if depth > 12 {
        return Value::Null;
    }
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        let mut merged = Map::new();
        for part in parts {
            if let Value::Object(o) = sample(root, part, depth + 1) {
                merged.extend(o);
            }
        }
        if let Value::Object(o) = sample(root, &without(schema, "allOf"), depth + 1) {
            merged.extend(o);
        }
        return Value::Object(merged);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(parts) = schema.get(key).and_then(Value::as_array) {
            let part = parts
                .iter()
                .find(|p| p.get("type") != Some(&json!("null")))
                .expect("an alternative");
            return sample(root, part, depth + 1);
        }
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null")
            .to_owned(),
        _ if schema.get("properties").is_some() => "object".to_owned(),
        _ => "string".to_owned(),
    };
    match ty.as_str() {
        "object" => {
            let mut out = Map::new();
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, prop) in props {
                    if required.contains(&name.as_str()) {
                        out.insert(name.clone(), sample(root, prop, depth + 1));
                    }
                }
            }
            Value::Object(out)
        }
        "array" => match schema.get("items") {
            Some(items) => json!([sample(root, items, depth + 1)]),
            None => json!([]),
        },
        "integer" => json!(4242),
        "number" => json!(1.5),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => match schema.get("format").and_then(Value::as_str) {
            Some("date-time") => json!("2026-01-02T03:04:05Z"),
            Some("uri") => json!("https://api.github.invalid/x"),
            _ => json!("sample"),
        },
    }
}

fn without(schema: &Value, key: &str) -> Value {
    let mut copy = schema.clone();
    if let Some(o) = copy.as_object_mut() {
        o.remove(key);
    }
    copy
}

/// One operation the local server serves: its guard, route and success answer.
struct Served {
    guard: OperationGuard,
    method: String,
    template: Vec<String>,
    status: u16,
    body: Value,
}

fn matches(template: &[String], path: &str) -> bool {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    segments.len() == template.len()
        && template
            .iter()
            .zip(&segments)
            .all(|(t, s)| (t.starts_with('{') && !s.is_empty()) || t == s)
}

/// The server's operations, built from the document.
fn served(api: &OpenApi) -> Vec<Served> {
    let root = api.document();
    OPERATIONS
        .iter()
        .map(|id| {
            let location = api.locate(&OperationSelector::id(*id)).expect("operation");
            let op = root.pointer(&location.pointer).expect("operation object");
            let (code, response) = op["responses"]
                .as_object()
                .expect("responses")
                .iter()
                .find(|(code, _)| code.starts_with('2'))
                .expect("a success response");
            let schema = &response["content"]["application/json"]["schema"];
            Served {
                guard: api.operation(&OperationSelector::id(*id)).expect("guard"),
                method: location.method.to_uppercase(),
                template: location
                    .path
                    .trim_start_matches('/')
                    .split('/')
                    .map(str::to_owned)
                    .collect(),
                status: code.parse().expect("status"),
                body: sample(root, schema, 0),
            }
        })
        .collect()
}

/// The server's answer: 422 for a request the document does not accept, else the success
/// body of the operation it matches.
fn answer(served: &[Served], refused: &AtomicU32, r: &Received) -> Reply {
    let Some(op) = served
        .iter()
        .find(|s| s.method == r.method && matches(&s.template, &r.path))
    else {
        refused.fetch_add(1, Ordering::SeqCst);
        return Reply::Json(404, json!({"message": "Not Found"}));
    };
    let query: Vec<(String, String)> = r
        .query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect();
    let body: Option<Value> =
        (!r.body.is_empty()).then(|| serde_json::from_slice(&r.body).expect("a JSON body"));
    let mut request = OutgoingRequest::new(&r.method, &r.path)
        .with_query(&query)
        .with_headers(&r.headers);
    if let Some(body) = &body {
        request = request.with_body(body);
    }
    let decision = op.guard.check(DriftMode::Strict, &request);
    if !decision.allowed {
        refused.fetch_add(1, Ordering::SeqCst);
        return Reply::Json(
            422,
            json!({"message": "Validation Failed", "detail": decision.detail}),
        );
    }
    Reply::Json(op.status, op.body.clone())
}

/// `data` holds exactly what the server sent for each field the result declares.
fn assert_projection(data: &Value, sent: &Value) {
    match (data, sent) {
        (Value::Array(got), Value::Array(sent)) => {
            assert_eq!(got.len(), sent.len());
            for (g, s) in got.iter().zip(sent) {
                assert_projection(g, s);
            }
        }
        (Value::Object(got), Value::Object(sent)) => {
            assert!(!got.is_empty());
            for (key, value) in got {
                assert_eq!(
                    value,
                    sent.get(key).unwrap_or(&Value::Null),
                    "field `{key}`"
                );
            }
        }
        other => panic!("unexpected result shape {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scaffolded_github_actions_send_requests_githubs_description_accepts() {
    let api = github_document();
    let served = Arc::new(served(api));
    let refused = Arc::new(AtomicU32::new(0));
    let upstream = {
        let served = Arc::clone(&served);
        let refused = Arc::clone(&refused);
        Upstream::start(move |r| answer(&served, &refused, r)).await
    };
    let catalog = github::catalog().expect("the scaffolded catalog builds");
    let channel = HttpChannel::builder()
        .base_url(upstream.url())
        .openapi(api.clone(), DriftMode::Strict)
        .catalog(&catalog)
        .build()
        .expect("every action's guard compiles at start-up");
    let vault = MemoryVault::new();
    vault.set(
        CredentialMeta::new(
            CREDENTIAL,
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new("ghp_test_token_not_real"),
    );
    let asked = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&asked);
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .vault(vault)
        .channel(channel)
        .consent(FnConsent::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { ConsentDecision::Approve }
        }))
        .build()
        .expect("executor");
    let session = Session::new("github-test");

    // Typed, as an application calls them.
    let created = executor
        .run(
            &github::IssuesCreate {
                owner: "octo-org".into(),
                repo: "hello-world".into(),
                title: "Crash on start".into(),
                body: Some("Steps to reproduce: start it.".into()),
                labels: Some(vec!["bug".into()]),
                assignee: None,
                assignees: None,
                issue_field_values: None,
                milestone: None,
                type_: None,
            },
            &session,
        )
        .await;
    assert_eq!(
        created.result.status,
        Status::Completed,
        "{}",
        created.result.to_json()
    );
    let issue = created.completed().expect("typed result");
    assert_eq!(issue.number, 4242);
    assert_eq!(issue.title, "sample");
    assert_eq!(upstream.requests(), 1);
    let sent = upstream.received();
    let body: Value = serde_json::from_slice(&sent[0].body).expect("JSON body");
    assert_eq!(
        body,
        json!({"title": "Crash on start", "body": "Steps to reproduce: start it.", "labels": ["bug"]}),
        "absent optional fields are not sent as null"
    );
    assert_eq!(sent[0].path, "/repos/octo-org/hello-world/issues");
    assert_eq!(
        sent[0].header("authorization"),
        Some("Bearer ghp_test_token_not_real")
    );

    // As an agent calls them: JSON arguments.
    let calls = [
        (
            "issues_get",
            json!({"owner": "octo-org", "repo": "hello-world", "issue_number": 7}),
            1,
        ),
        (
            "issues_update",
            json!({"owner": "octo-org", "repo": "hello-world", "issue_number": 7,
            "state": "closed", "state_reason": "completed"}),
            2,
        ),
        (
            "issues_list_for_repo",
            json!({"owner": "octo-org", "repo": "hello-world",
            "state": "open", "per_page": 10, "labels": "bug"}),
            3,
        ),
        (
            "issues_create_comment",
            json!({"owner": "octo-org", "repo": "hello-world",
            "issue_number": 7, "body": "Fixed in 1.2."}),
            4,
        ),
        (
            "issues_list_comments",
            json!({"owner": "octo-org", "repo": "hello-world",
            "issue_number": 7}),
            5,
        ),
        (
            "pulls_list",
            json!({"owner": "octo-org", "repo": "hello-world", "state": "open",
            "sort": "updated", "direction": "desc"}),
            6,
        ),
        (
            "pulls_get",
            json!({"owner": "octo-org", "repo": "hello-world", "pull_number": 12}),
            7,
        ),
        (
            "pulls_create",
            json!({"owner": "octo-org", "repo": "hello-world", "title": "Fix crash",
            "head": "fix-crash", "base": "main"}),
            8,
        ),
        (
            "repos_get",
            json!({"owner": "octo-org", "repo": "hello-world"}),
            9,
        ),
        (
            "repos_create_release",
            json!({"owner": "octo-org", "repo": "hello-world",
            "tag_name": "v1.2.0", "name": "1.2.0", "draft": true}),
            10,
        ),
        (
            "repos_get_release",
            json!({"owner": "octo-org", "repo": "hello-world",
            "release_id": 99}),
            11,
        ),
    ];
    for (action, args, served_index) in calls {
        let before = upstream.requests();
        let result = executor.call(action, args, &session).await;
        assert_eq!(
            result.status,
            Status::Completed,
            "{action}: {}",
            result.to_json()
        );
        assert_eq!(upstream.requests(), before + 1, "{action}: one request");
        let data = result.data.as_ref().expect("data");
        assert_projection(data, &served[served_index].body);
    }
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "the server built from the document accepted every request"
    );
    assert_eq!(upstream.requests(), 12);
    // Consent was asked for the five actions whose consent is per_call, never for a read.
    assert_eq!(asked.load(Ordering::SeqCst), 5);

    // A request the document does not accept is refused by the channel's guard, never sent.
    let before = upstream.requests();
    let result = executor
        .call(
            "issues_get",
            json!({"owner": "octo-org", "repo": "hello-world", "issue_number": "seven"}),
            &session,
        )
        .await;
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(upstream.requests(), before);
}
