//! `sallyport scaffold` reads GitHub's real answers right: seven operations whose answers
//! are more than one JSON body (merge a pull request, delete a repository, dispatch a
//! workflow, get content, create an issue comment, create a ref, check whether a pull request
//! was merged) and the reads that reconcile them, scaffolded from GitHub's published
//! description (the `@octokit/openapi` fixture), with the author's decisions applied to the
//! generator's output (`tests/fixtures/scaffold/github_answers.rs` is exactly that), compiled,
//! and run against a local server that answers as the document says: a `204` for a dispatch
//! without run details, the file, directory, symlink and submodule forms of a content, `204`
//! and `404` for check-if-merged. Each result is the truth (no `unknown` for an answer the
//! document lists), and the testkit's bench passes the catalog.

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
use serde_json::{Value, json};

#[allow(
    dead_code,
    unreachable_pub,
    reason = "the module is a whole catalog; the test calls most of it through the executor"
)]
#[path = "../../fixtures/scaffold/github_answers.rs"]
mod github_answers;

/// The credential the module binds (GitHub's document declares no security scheme).
const CREDENTIAL: &str = "github";

/// The author's decisions for one operation: what replaces each `choose`, the reconcile
/// action of a mutating one, and any other line the author rewrote.
struct Decided {
    operation: &'static str,
    effect: &'static str,
    consent: &'static str,
    retry: &'static str,
    reconcile: Option<&'static str>,
    /// What replaces `choose` in `status(404) = choose`.
    not_found: Option<&'static str>,
    /// Other lines of the action the author rewrote: (generated, committed).
    rewritten: &'static [(&'static str, &'static str)],
}

/// The operations, in the module's order, and what the author decided.
const DECIDED: [Decided; 11] = [
    Decided {
        operation: "pulls/merge",
        effect: "irreversible_or_broad",
        consent: "per_call",
        retry: "never",
        reconcile: Some("pulls_check_if_merged"),
        not_found: None,
        rewritten: &[],
    },
    Decided {
        operation: "pulls/check-if-merged",
        effect: "observe",
        consent: "none",
        retry: "safe",
        reconcile: None,
        // "Not Found if pull request has not been merged": an answer, not an error.
        not_found: Some(r##"completed(value = r#"{"merged": false}"#)"##),
        // The 204 is the other answer; the result says which it was.
        rewritten: &[(
            "    result = (),",
            "    status(204) = completed(value = r#\"{\"merged\": true}\"#),\n    result = PullMerged,",
        )],
    },
    Decided {
        operation: "repos/delete",
        effect: "irreversible_or_broad",
        consent: "per_call",
        retry: "never",
        reconcile: Some("repos_get"),
        not_found: None,
        rewritten: &[],
    },
    Decided {
        operation: "repos/get",
        effect: "observe",
        consent: "none",
        retry: "safe",
        reconcile: None,
        not_found: None,
        rewritten: &[],
    },
    Decided {
        operation: "actions/create-workflow-dispatch",
        effect: "external_commitment",
        consent: "per_call",
        retry: "never",
        reconcile: Some("actions_list_workflow_runs"),
        not_found: None,
        rewritten: &[],
    },
    Decided {
        operation: "actions/list-workflow-runs",
        effect: "observe",
        consent: "none",
        retry: "safe",
        reconcile: None,
        not_found: None,
        rewritten: &[],
    },
    Decided {
        operation: "repos/get-content",
        effect: "observe",
        consent: "none",
        retry: "safe",
        reconcile: None,
        not_found: None,
        rewritten: &[],
    },
    Decided {
        operation: "issues/create-comment",
        effect: "reversible_change",
        consent: "per_call",
        retry: "never",
        reconcile: Some("issues_list_comments"),
        not_found: None,
        rewritten: &[],
    },
    Decided {
        operation: "issues/list-comments",
        effect: "observe",
        consent: "none",
        retry: "safe",
        reconcile: None,
        not_found: None,
        rewritten: &[],
    },
    Decided {
        operation: "git/create-ref",
        effect: "reversible_change",
        consent: "session",
        retry: "never",
        reconcile: Some("git_get_ref"),
        not_found: None,
        rewritten: &[],
    },
    Decided {
        operation: "git/get-ref",
        effect: "observe",
        consent: "none",
        retry: "safe",
        reconcile: None,
        not_found: None,
        rewritten: &[],
    },
];

/// The type the author added for `pulls_check_if_merged`'s result.
const AUTHORS_TYPES: &str = "
/// Whether the pull request has been merged (GitHub answers 204 if it has, 404 if not).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct PullMerged {
    /// The pull request has been merged.
    pub merged: bool,
}
";

fn github_document() -> &'static OpenApi {
    static DOCUMENT: OnceLock<OpenApi> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/openapi/github/api.github.com.json.gz"
        );
        let file = std::fs::File::open(path).expect("fixture");
        let mut text = String::new();
        flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .expect("gunzip");
        OpenApi::parse(&text).expect("GitHub's description parses")
    })
}

/// `generated` with the author's decisions applied, action by action (each action's block
/// starts at its `// \`operationId\`` line).
fn decide(generated: &str) -> String {
    let mut out = String::new();
    let mut current: Option<&Decided> = None;
    for line in generated.lines() {
        if let Some(id) = line
            .strip_prefix("// `")
            .and_then(|rest| rest.split_once('`'))
            .map(|(id, _)| id)
        {
            current = DECIDED.iter().find(|d| d.operation == id);
            assert!(current.is_some(), "an operation nobody decided: {id}");
        }
        let Some(decided) = current else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let replaced = match line {
            "    effect = choose," => format!("    effect = {},", decided.effect),
            "    consent = choose," => format!("    consent = {},", decided.consent),
            "    retry = choose," => match decided.reconcile {
                Some(reconcile) => format!(
                    "    retry = {},\n    reconcile = \"{reconcile}\",",
                    decided.retry
                ),
                None => format!("    retry = {},", decided.retry),
            },
            "    status(404) = choose," => format!(
                "    status(404) = {},",
                decided
                    .not_found
                    .expect("a 404 decision for this operation")
            ),
            other => decided
                .rewritten
                .iter()
                .find(|(generated, _)| *generated == other)
                .map_or_else(
                    || other.to_owned(),
                    |(_, committed)| (*committed).to_owned(),
                ),
        };
        out.push_str(&replaced);
        out.push('\n');
    }
    out.push_str(AUTHORS_TYPES);
    out
}

fn generated() -> sallyport_scaffold::Generated {
    Scaffold::new(github_document())
        .operations(DECIDED.iter().map(|d| d.operation))
        .credential(CREDENTIAL)
        .generate()
}

/// With `SALLYPORT_SCAFFOLD=overwrite`, writes the committed module from the generator and
/// the decisions above (then read it).
#[test]
fn the_committed_module_is_the_generators_with_the_authors_decisions_applied() {
    let generated = generated();
    assert_eq!(generated.unsupported, []);
    let open: Vec<(&str, &[Decision])> = generated
        .actions
        .iter()
        .map(|a| (a.operation_id.as_str(), a.open_decisions.as_slice()))
        .collect();
    let three = &[Decision::Effect, Decision::Consent, Decision::Retry][..];
    let with_404 = &[
        Decision::Effect,
        Decision::Consent,
        Decision::Retry,
        Decision::NotFound,
    ][..];
    assert_eq!(
        open,
        DECIDED
            .iter()
            .map(|d| (
                d.operation,
                if d.operation == "pulls/check-if-merged" {
                    with_404
                } else {
                    three
                }
            ))
            .collect::<Vec<_>>(),
        "the document describes one 404 as an answer; the scaffold leaves it to the author"
    );
    let decided = decide(&generated.code);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/scaffold/github_answers.rs"
    );
    if std::env::var("SALLYPORT_SCAFFOLD").as_deref() == Ok("overwrite") {
        std::fs::write(path, &decided).expect("write the module");
    }
    assert_eq!(
        include_str!("../../fixtures/scaffold/github_answers.rs"),
        decided,
        "tests/fixtures/scaffold/github_answers.rs is not the generator's output with the decisions in this test: \
         regenerate it with SALLYPORT_SCAFFOLD=overwrite and read the difference"
    );
}

#[test]
fn the_generator_writes_each_answer_the_document_lists() {
    let code = generated().code;
    for expected in [
        // A success without a body beside one with: the result is optional, the empty
        // status completed with no data.
        "    // 204 has no body (\"Empty response when `return_run_details` parameter is `false`.\"): the\n    // result is `None` (`completed(empty)`).\n    status(204) = completed(empty),\n    result = Option<WorkflowDispatchResponseSummary>,\n",
        // A `oneOf` whose discriminator cannot tag a list: an untagged enum, said so.
        "#[serde(untagged)]\npub enum ReposGetContentResult {\n",
        "    // The success response is a `oneOf` of 4 forms: an untagged enum, since its discriminator\n",
        // Each object form carries the one `type` it admits, so a form fits only its answers.
        "    pub type_: ContentFileSummaryType,\n",
        // A 404 described as an answer: the author's decision, with the document's words.
        "    // 404, in the document's words: \"Not Found if pull request has not been merged\". An answer or\n",
        "    status(404) = choose,\n",
    ] {
        assert!(
            code.contains(expected),
            "missing:\n{expected}\n--- in:\n{code}"
        );
    }
    // A 404 that only names the status stays the channel's `rejected` / not_found.
    assert_eq!(code.matches("status(404)").count(), 1);
}

/// One route of the local server: the operation's method and path template, and its guard
/// (every request is checked against the document before it is answered).
struct Route {
    operation: &'static str,
    method: String,
    template: Vec<String>,
    guard: OperationGuard,
}

fn routes(api: &OpenApi) -> Vec<Route> {
    DECIDED
        .iter()
        .map(|d| {
            let location = api
                .locate(&OperationSelector::id(d.operation))
                .expect("operation");
            Route {
                operation: d.operation,
                method: location.method.to_uppercase(),
                template: location
                    .path
                    .trim_start_matches('/')
                    .split('/')
                    .map(str::to_owned)
                    .collect(),
                guard: api
                    .operation(&OperationSelector::id(d.operation))
                    .expect("guard"),
            }
        })
        .collect()
}

/// The route `r` takes, with the path's segments.
fn route<'a>(routes: &'a [Route], r: &Received) -> Option<(&'a Route, Vec<String>)> {
    let segments: Vec<String> = r
        .path
        .trim_start_matches('/')
        .split('/')
        .map(str::to_owned)
        .collect();
    let route = routes.iter().find(|route| {
        route.method == r.method
            && route.template.len() == segments.len()
            && route
                .template
                .iter()
                .zip(&segments)
                .all(|(t, s)| (t.starts_with('{') && !s.is_empty()) || t == s)
    })?;
    Some((route, segments))
}

/// GitHub's `_links` and URLs of a content at `path`.
fn content(kind: &str, path: &str, extra: Value) -> Value {
    let mut form = json!({
        "type": kind,
        "size": 12,
        "name": path,
        "path": path,
        "sha": "3d21ec53a331a6f037a91c368710b99387d012c1",
        "url": format!("https://api.github.com/repos/octo-org/hello-world/contents/{path}"),
        "git_url": "https://api.github.com/repos/octo-org/hello-world/git/blobs/3d21ec53",
        "html_url": format!("https://github.com/octo-org/hello-world/blob/main/{path}"),
        "download_url": null,
        "_links": {"git": null, "html": null, "self": "https://api.github.com/x"},
    });
    if let (Some(form), Value::Object(extra)) = (form.as_object_mut(), extra) {
        form.extend(extra);
    }
    form
}

/// The answer GitHub's document gives for `r`, or 422 for a request it does not accept.
fn answer(routes: &[Route], refused: &AtomicU32, r: &Received) -> Reply {
    let Some((route, segments)) = route(routes, r) else {
        refused.fetch_add(1, Ordering::SeqCst);
        return Reply::Json(404, json!({"message": "Not Found"}));
    };
    let body: Option<Value> =
        (!r.body.is_empty()).then(|| serde_json::from_slice(&r.body).expect("a JSON body"));
    let mut request = OutgoingRequest::new(&r.method, &r.path).with_headers(&r.headers);
    if let Some(body) = &body {
        request = request.with_body(body);
    }
    let decision = route.guard.check(DriftMode::Strict, &request);
    if !decision.allowed {
        refused.fetch_add(1, Ordering::SeqCst);
        return Reply::Json(
            422,
            json!({"message": "Validation Failed", "detail": decision.detail}),
        );
    }
    let empty = || Reply::Raw(204, Vec::new(), Default::default());
    let last = segments.last().map(String::as_str).unwrap_or_default();
    match route.operation {
        "pulls/merge" => Reply::Json(
            200,
            json!({"sha": "6dcb09b5b57875f334f61aebed695e2e4193db5e", "merged": true,
                   "message": "Pull Request successfully merged"}),
        ),
        // 204 if the pull request has been merged, 404 if not (pull 2 was not).
        "pulls/check-if-merged" if segments[4] == "2" => {
            Reply::Raw(404, Vec::new(), Default::default())
        }
        "pulls/check-if-merged" | "repos/delete" => empty(),
        "actions/create-workflow-dispatch" => {
            if body.as_ref().and_then(|b| b.get("return_run_details")) == Some(&json!(true)) {
                Reply::Json(
                    200,
                    json!({"workflow_run_id": 30433642,
                           "run_url": "https://api.github.com/repos/octo-org/hello-world/actions/runs/30433642",
                           "html_url": "https://github.com/octo-org/hello-world/actions/runs/30433642"}),
                )
            } else {
                empty()
            }
        }
        "repos/get-content" => Reply::Json(
            200,
            match last {
                "README.md" => content(
                    "file",
                    "README.md",
                    json!({"encoding": "base64", "content": "SGVsbG8gd29ybGQK"}),
                ),
                "docs" => json!([
                    content("file", "guide.md", json!({})),
                    content("dir", "images", json!({})),
                ]),
                "latest" => content("symlink", "latest", json!({"target": "releases/1.2"})),
                _ => content(
                    "submodule",
                    last,
                    json!({"submodule_git_url": "git://github.com/octo-org/vendored.git"}),
                ),
            },
        ),
        "issues/create-comment" => Reply::Json(
            201,
            json!({"id": 1, "node_id": "MDEyOklzc3VlQ29tbWVudDE=", "url": "https://api.github.com/x",
                   "html_url": "https://github.com/x", "issue_url": "https://api.github.com/y",
                   "body": body.as_ref().and_then(|b| b.get("body")).cloned().unwrap_or_default(),
                   "user": null, "author_association": "OWNER",
                   "created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-02T03:04:05Z"}),
        ),
        "git/create-ref" => Reply::Json(
            201,
            json!({"ref": "refs/heads/feature-a", "node_id": "MDM6UmVmcmVmcy9oZWFkcy9mZWF0dXJlQQ==",
                   "url": "https://api.github.com/repos/octo-org/hello-world/git/refs/heads/feature-a",
                   "object": {"type": "commit", "sha": "aa218f56b14c9653891f9e74264a383fa43fefbd",
                              "url": "https://api.github.com/x"}}),
        ),
        // GitHub's generic 404 ("Resource not found"): the repository is gone.
        "repos/get" => Reply::Json(
            404,
            json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}),
        ),
        other => Reply::Json(
            500,
            json!({"message": format!("no answer for {other} in this test")}),
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scaffolded_actions_read_githubs_answers_as_the_document_describes_them() {
    let api = github_document();
    let routes = Arc::new(routes(api));
    let refused = Arc::new(AtomicU32::new(0));
    let upstream = {
        let routes = Arc::clone(&routes);
        let refused = Arc::clone(&refused);
        Upstream::start(move |r| answer(&routes, &refused, r)).await
    };
    let catalog = github_answers::catalog().expect("the scaffolded catalog builds");
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
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .vault(vault)
        .channel(channel)
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .build()
        .expect("executor");
    let session = Session::new("github-answers");
    let repo = json!({"owner": "octo-org", "repo": "hello-world"});
    let with = |extra: Value| {
        let mut args = repo.clone();
        if let (Some(args), Value::Object(extra)) = (args.as_object_mut(), extra) {
            args.extend(extra);
        }
        args
    };
    let file = content(
        "file",
        "README.md",
        json!({"encoding": "base64", "content": "SGVsbG8gd29ybGQK"}),
    );
    let directory = json!([
        content("file", "guide.md", json!({})),
        content("dir", "images", json!({})),
    ]);
    let symlink = content("symlink", "latest", json!({"target": "releases/1.2"}));
    let submodule = content(
        "submodule",
        "vendored",
        json!({"submodule_git_url": "git://github.com/octo-org/vendored.git"}),
    );
    let run = json!({"workflow_run_id": 30433642,
        "run_url": "https://api.github.com/repos/octo-org/hello-world/actions/runs/30433642",
        "html_url": "https://github.com/octo-org/hello-world/actions/runs/30433642"});
    // (action, arguments, the truth: the exact data, or the body whose fields the result
    // keeps)
    let calls: Vec<(&str, Value, Truth)> = vec![
        (
            "pulls_merge",
            with(json!({"pull_number": 1})),
            Truth::Exact(
                json!({"merged": true, "message": "Pull Request successfully merged",
                   "sha": "6dcb09b5b57875f334f61aebed695e2e4193db5e"}),
            ),
        ),
        (
            "pulls_check_if_merged",
            with(json!({"pull_number": 1})),
            Truth::Exact(json!({"merged": true})),
        ),
        (
            "pulls_check_if_merged",
            with(json!({"pull_number": 2})),
            Truth::Exact(json!({"merged": false})),
        ),
        ("repos_delete", repo.clone(), Truth::Exact(Value::Null)),
        (
            "actions_create_workflow_dispatch",
            with(json!({"workflow_id": "ci.yml", "ref": "main"})),
            Truth::Exact(Value::Null),
        ),
        (
            "actions_create_workflow_dispatch",
            with(json!({"workflow_id": "ci.yml", "ref": "main", "return_run_details": true})),
            Truth::Exact(run),
        ),
        (
            "repos_get_content",
            with(json!({"path": "README.md"})),
            Truth::Form("file", file),
        ),
        (
            "repos_get_content",
            with(json!({"path": "docs"})),
            Truth::Kept(directory),
        ),
        (
            "repos_get_content",
            with(json!({"path": "latest"})),
            Truth::Form("symlink", symlink),
        ),
        (
            "repos_get_content",
            with(json!({"path": "vendored"})),
            Truth::Form("submodule", submodule),
        ),
        (
            "issues_create_comment",
            with(json!({"issue_number": 7, "body": "Fixed in 1.2."})),
            Truth::Kept(json!({"id": 1, "node_id": "MDEyOklzc3VlQ29tbWVudDE=",
                   "url": "https://api.github.com/x", "html_url": "https://github.com/x",
                   "issue_url": "https://api.github.com/y", "body": "Fixed in 1.2.",
                   "author_association": "OWNER",
                   "created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-02T03:04:05Z"})),
        ),
        (
            "git_create_ref",
            with(json!({"ref": "refs/heads/feature-a",
                        "sha": "aa218f56b14c9653891f9e74264a383fa43fefbd"})),
            Truth::Kept(json!({"ref": "refs/heads/feature-a",
                   "node_id": "MDM6UmVmcmVmcy9oZWFkcy9mZWF0dXJlQQ==",
                   "url": "https://api.github.com/repos/octo-org/hello-world/git/refs/heads/feature-a"})),
        ),
    ];
    let mut unknown = 0;
    for (action, args, truth) in &calls {
        let before = upstream.requests();
        let result = executor.call(action, args.clone(), &session).await;
        if result.status == Status::Unknown {
            unknown += 1;
        }
        assert_eq!(
            result.status,
            Status::Completed,
            "{action} {args}: {}",
            result.to_json()
        );
        assert_eq!(upstream.requests(), before + 1, "{action}: one request");
        let data = result.data.clone().unwrap_or(Value::Null);
        truth.holds(&data, &format!("{action} {args}"));
    }
    assert_eq!(
        unknown, 0,
        "no answer the document lists comes back unknown"
    );
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "the server checked every request against the document and accepted it"
    );

    // A 404 the document does not describe as an answer ("Resource not found") is still an
    // error.
    let result = executor.call("repos_get", repo.clone(), &session).await;
    assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
    assert_eq!(result.code_str(), Some("not_found"), "{}", result.to_json());
}

/// What a result must hold.
enum Truth {
    /// Exactly this data (`null`: none).
    Exact(Value),
    /// Of this body (an object, or a list of them), the fields the result keeps: each one
    /// the result has is the body's (or `null` where the body has none), and it has some.
    Kept(Value),
    /// The form of an answer of several, tagged `type`: the body's fields as in `Kept`, and
    /// the form's `type` among them.
    Form(&'static str, Value),
}

impl Truth {
    fn holds(&self, data: &Value, call: &str) {
        match self {
            Self::Exact(truth) => assert_eq!(data, truth, "{call}"),
            Self::Kept(body) => kept(data, body, call),
            Self::Form(kind, body) => {
                assert_eq!(
                    data["type"],
                    json!(kind),
                    "{call}: the form is the answer's"
                );
                kept(data, body, call);
            }
        }
    }
}

fn kept(data: &Value, body: &Value, call: &str) {
    match (data, body) {
        (Value::Array(got), Value::Array(sent)) => {
            assert_eq!(got.len(), sent.len(), "{call}");
            for (g, s) in got.iter().zip(sent) {
                kept(g, s, call);
            }
        }
        (Value::Object(got), Value::Object(sent)) => {
            assert!(
                got.len() >= 3,
                "{call}: the result keeps the answer's fields: {data}"
            );
            for (key, value) in got {
                assert_eq!(
                    value,
                    sent.get(key).unwrap_or(&Value::Null),
                    "{call}: field `{key}`"
                );
            }
        }
        _ => panic!("{call}: {data} is not the shape of {body}"),
    }
}

/// The testkit's bench passes the decided catalog: among its checks, a timeout after a
/// commit is `unknown` only for the mutating actions (each names its reconcile read), and
/// no answer is read as `unknown` where the bench expects a result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_testkit_passes_the_decided_catalog() {
    let catalog = github_answers::catalog().expect("the scaffolded catalog builds");
    let repo = json!({"owner": "octo-org", "repo": "hello-world"});
    let with = |extra: Value| {
        let mut args = repo.clone();
        if let (Some(args), Value::Object(extra)) = (args.as_object_mut(), extra) {
            args.extend(extra);
        }
        args
    };
    let report = sallyport_testkit::bench(&catalog)
        .example(
            "git_create_ref",
            with(json!({"ref": "refs/heads/feature-a",
            "sha": "aa218f56b14c9653891f9e74264a383fa43fefbd"})),
        )
        // GitHub names a branch's ref `heads/feature-a`, but a path parameter that holds a
        // slash is refused (it would name another path): the example is one segment.
        .example("git_get_ref", with(json!({"ref": "feature-a"})))
        .example("repos_get_content", with(json!({"path": "README.md"})))
        .example(
            "actions_create_workflow_dispatch",
            with(json!({"workflow_id": "ci.yml", "ref": "main"})),
        )
        .run()
        .await;
    println!("{report}");
    report.assert_passed();
    assert_eq!(report.actions.len(), DECIDED.len());
    // The timeout check ran, and held, for each mutating action: `unknown` there is the truth.
    let mutating: Vec<&str> = report
        .actions
        .iter()
        .filter(|a| {
            a.check(sallyport_testkit::Check::TimeoutAfterCommit)
                .is_some_and(|c| c.verdict == sallyport_testkit::Verdict::Passed)
        })
        .map(|a| a.action.as_str())
        .collect();
    assert_eq!(
        mutating.len(),
        DECIDED.iter().filter(|d| d.reconcile.is_some()).count(),
        "{mutating:?}"
    );
}
