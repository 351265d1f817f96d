//! The HTTP channel against a real upstream on 127.0.0.1:0 and a real SQLite journal: every
//! HTTP row of DESIGN.md's failure rules and RELIABILITY.md's fault list. Each test checks
//! the status and code the agent saw, the server's request count, the journal's dispatch
//! count (read from the SQLite file), and the audit record.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use base64::Engine as _;
use sallyport_core::code::{RefusalCode, UpstreamCode};
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::{ActionResult, Refusal};
use sallyport_core::target::Target;
use sallyport_core::vault::{
    ApiKeyPlacement, Binding, CredentialKind, CredentialMeta, MemoryVault, Secret,
};
use sallyport_core::{Action, ActionSpec, Catalog, Executor, Session, Status};
use sallyport_http::{
    HttpChannel, HttpChannelBuilder, HttpRequest, KeyQuoting, ProbeVerdict, RepeatBehaviour,
    RequestParts,
};
use sallyport_tests::http_server::{
    Drop, Reply, Upstream, audit_event, journal_dispatches, journal_text,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const CANARY: &str = "canary-SECRET-9f8e7d6c";

/// Read one deployment.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_deployment", effect = observe)]
#[http(get = "/v1/deployments/{deployment_id}", result = Resource)]
struct GetDeployment {
    deployment_id: String,
}

/// Read one invoice.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe)]
#[http(get = "/v1/invoices/{invoice_id}", result = Resource)]
struct GetInvoice {
    invoice_id: String,
}

/// Queue one build for the preview environment.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_deployment", effect = external_commitment, retry = idempotency_key,
         reconcile = "get_deployment", credential = "deploy-api")]
#[http(post = "/v1/projects/{project_id}/deployments", status(202) = pending,
       status(409) = already_in_desired_state, result = Resource)]
struct CreateDeployment {
    #[scope(project)]
    project_id: String,
    build_id: String,
    /// Why.
    #[audit_note]
    reason: Option<String>,
}

/// Send one invoice to the customer.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "send_invoice", effect = external_commitment, reconcile = "get_invoice")]
#[http(post = "/v1/invoices/{invoice_id}/send", header("X-Note" = note), result = Resource)]
struct SendInvoice {
    invoice_id: String,
    note: Option<String>,
}

/// Search notes by a header filter (a hand-written request).
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "search_notes", effect = observe)]
#[http(get = "/v1/notes", result = ())]
struct SearchNotes {
    header_name: String,
    header_value: String,
}

impl HttpRequest for SearchNotes {
    fn request(&self) -> Result<RequestParts, Refusal> {
        Ok(RequestParts::new()
            .literal("/v1/notes")
            .header(self.header_name.clone(), self.header_value.clone()))
    }
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Resource {
    id: String,
    state: String,
}

struct Rig {
    upstream: Upstream,
    executor: Executor,
    journal: PathBuf,
    vault: Arc<MemoryVault>,
    asks: Arc<AtomicU32>,
    _dir: tempfile::TempDir,
}

fn catalog() -> Catalog {
    Catalog::builder()
        .action::<GetDeployment>()
        .action::<GetInvoice>()
        .action_with_spec::<CreateDeployment>(|spec| {
            http(spec, |t| {
                t.body_rules.push(sallyport_core::target::BodyRule {
                    pointer: "/state".into(),
                    equals: json!("rejected"),
                    status: Status::Rejected,
                    code: None,
                });
                t.message_field = Some("/message".into());
            })
        })
        .action_with_spec::<SendInvoice>(|spec| {
            http(spec, |t| t.message_field = Some("/message".into()))
        })
        .action_with_spec::<SearchNotes>(|spec| http(spec, |t| t.custom_request = true))
        .build()
        .expect("catalog")
}

fn http(
    mut spec: ActionSpec,
    f: impl FnOnce(&mut sallyport_core::target::HttpTarget),
) -> ActionSpec {
    if let Target::Http(t) = &mut spec.target {
        f(t);
    }
    spec
}

async fn rig(
    reply: impl Fn(&sallyport_tests::http_server::Received) -> Reply + Send + Sync + 'static,
) -> Rig {
    rig_with(reply, |b| b, None).await
}

async fn rig_with(
    reply: impl Fn(&sallyport_tests::http_server::Received) -> Reply + Send + Sync + 'static,
    configure: impl FnOnce(HttpChannelBuilder) -> HttpChannelBuilder,
    credential: Option<(CredentialKind, String)>,
) -> Rig {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let vault = Arc::new(MemoryVault::new());
    let (kind, binding) = credential.unwrap_or((CredentialKind::Bearer, upstream.url()));
    vault.set(
        CredentialMeta::new("deploy-api", kind, Binding::url(binding)),
        Secret::new(CANARY),
    );
    let channel = configure(
        HttpChannel::builder()
            .base_url(upstream.url())
            .backoff(Duration::from_millis(10), Duration::from_millis(40))
            .request_for::<SearchNotes>(),
    )
    .build()
    .expect("channel");
    let asks = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&asks);
    let executor = Executor::builder(catalog())
        .journal(SqliteJournal::open(&journal).expect("journal"))
        .vault_arc(vault.clone())
        .consent(FnConsent::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { ConsentDecision::Approve }
        }))
        .channel(channel)
        .build()
        .expect("executor");
    Rig {
        upstream,
        executor,
        journal,
        vault,
        asks,
        _dir: dir,
    }
}

impl Rig {
    async fn call(&self, action: &str, args: Value) -> ActionResult {
        let session = Session::new("s1").allow_any("project");
        let result = self.executor.call(action, args, &session).await;
        assert_no_canary(&result.to_json());
        assert_no_canary(&journal_text(&self.journal));
        result
    }

    fn dispatches(&self, r: &ActionResult) -> u32 {
        journal_dispatches(&self.journal, r.attempt_id.as_str())
    }

    fn audit(&self, r: &ActionResult) -> Value {
        audit_event(&self.journal, r.attempt_id.as_str())
    }
}

fn assert_no_canary(text: &str) {
    let b64 = base64::engine::general_purpose::STANDARD;
    for form in [
        CANARY.to_owned(),
        b64.encode(CANARY),
        b64.encode(format!("user:{CANARY}")),
        hex(CANARY),
    ] {
        assert!(!text.contains(&form), "secret leaked ({form}) in: {text}");
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn create(project: &str) -> Value {
    json!({"project_id": project, "build_id": "build_7", "reason": "ship the fix"})
}

fn ok_resource() -> Reply {
    Reply::Json(
        200,
        json!({"id": "dep_1", "state": "running", "internal_url": "http://10.0.0.7/admin", "owner_email": "a@corp.example"}),
    )
}

// ---------------------------------------------------------------- requests

#[tokio::test]
async fn an_observe_call_completes_with_only_the_declared_result_fields() {
    let rig = rig(|_| ok_resource()).await;
    let r = rig
        .call("get_deployment", json!({"deployment_id": "dep 1"}))
        .await;
    assert_eq!(r.status, Status::Completed);
    assert_eq!(r.data, Some(json!({"id": "dep_1", "state": "running"})));
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(rig.dispatches(&r), 1);
    let seen = rig.upstream.received();
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].path, "/v1/deployments/dep%201");
    assert_eq!(seen[0].header("accept"), Some("application/json"));
    assert_eq!(seen[0].header("content-length"), None);
    let audit = rig.audit(&r);
    assert_eq!(audit["dispatches"], 1);
    assert_eq!(audit["upstream_status"], 200);
    assert_eq!(
        audit["request"],
        format!("GET {}/v1/deployments/dep%201", rig.upstream.url())
    );
}

#[tokio::test]
async fn a_body_that_arrives_in_many_chunks_is_read_whole() {
    let body = serde_json::to_vec(
        &json!({"id": "dep_1", "state": "running", "internal_url": "http://10.0.0.7/admin"}),
    )
    .expect("json");
    let pieces = body.len().div_ceil(7);
    let body = bytes::Bytes::from(body);
    let rig = rig(move |_| Reply::Chunked {
        status: 200,
        body: body.clone(),
        chunk: 7,
    })
    .await;
    assert!(pieces > 5);
    let r = rig
        .call("get_deployment", json!({"deployment_id": "dep_1"}))
        .await;
    assert_eq!(r.status, Status::Completed, "{:?}", r.reason);
    assert_eq!(r.data, Some(json!({"id": "dep_1", "state": "running"})));
    assert_eq!(rig.upstream.requests(), 1);
}

#[tokio::test]
async fn path_values_that_would_change_the_path_are_refused_before_consent_and_send_nothing() {
    let rig = rig(|_| ok_resource()).await;
    for bad in [
        "../admin",
        "..",
        "a/b",
        "%2e%2e",
        "%2F",
        "%252e%252e",
        "a\\b",
    ] {
        let r = rig.call("create_deployment", create(bad)).await;
        assert_eq!(r.status, Status::Rejected, "{bad}");
        assert_eq!(r.code, Some(RefusalCode::InvalidRequest.into()), "{bad}");
        assert!(
            r.reason
                .as_deref()
                .unwrap()
                .contains("would change the request path")
        );
        assert_eq!(rig.dispatches(&r), 0);
        assert_eq!(rig.audit(&r)["phase"], "refused");
    }
    assert_eq!(rig.asks.load(Ordering::SeqCst), 0);
    assert_eq!(rig.upstream.requests(), 0);
}

#[tokio::test]
async fn cr_lf_in_a_header_field_is_refused_before_consent_and_sends_nothing() {
    let rig = rig(|_| ok_resource()).await;
    let r = rig
        .call(
            "send_invoice",
            json!({"invoice_id": "inv_1", "note": "hi\r\nX-Admin: true"}),
        )
        .await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(RefusalCode::InvalidRequest.into()));
    assert!(r.reason.as_deref().unwrap().contains("control character"));
    assert_eq!(rig.asks.load(Ordering::SeqCst), 0);
    assert_eq!(rig.upstream.requests(), 0);
    assert_eq!(rig.dispatches(&r), 0);
}

#[tokio::test]
async fn agent_attempts_to_set_authorization_cookie_or_host_are_refused_and_send_nothing() {
    let rig = rig(|_| Reply::Json(200, json!({}))).await;
    for name in [
        "Authorization",
        "cookie",
        "Host",
        "Idempotency-Key",
        "X-Bad\r\nName",
    ] {
        let r = rig
            .call(
                "search_notes",
                json!({"header_name": name, "header_value": "x"}),
            )
            .await;
        assert_eq!(r.status, Status::Rejected, "{name}");
        assert_eq!(r.code, Some(RefusalCode::InvalidRequest.into()), "{name}");
    }
    let r = rig
        .call(
            "search_notes",
            json!({"header_name": "X-Filter", "header_value": "open"}),
        )
        .await;
    assert_eq!(r.status, Status::Completed);
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(rig.upstream.received()[0].header("x-filter"), Some("open"));
}

#[tokio::test]
async fn the_idempotency_key_and_bearer_credential_are_attached_and_the_audit_note_is_not_sent() {
    let rig = rig(|_| Reply::Idempotent(None)).await;
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::Completed);
    assert_eq!(r.data, Some(json!({"id": "res_1", "state": "created"})));
    let seen = &rig.upstream.received()[0];
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    let key = seen.header("idempotency-key").unwrap();
    assert!(
        key.starts_with('"') && key.ends_with('"') && key.len() == 38,
        "{key}"
    );
    assert_eq!(seen.body.as_ref(), br#"{"build_id":"build_7"}"#);
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(rig.dispatches(&r), 1);
    assert_eq!(rig.audit(&r)["note"], "ship the fix");
}

#[tokio::test]
async fn a_basic_credential_is_sent_as_basic_authorization_and_never_shown() {
    let rig = rig_with(
        |r| {
            Reply::Json(
                200,
                json!({"id": "res_1", "state": r.header("authorization").unwrap_or_default()}),
            )
        },
        |b| b,
        Some((
            CredentialKind::Basic {
                user: "deployer".to_owned(),
            },
            String::new(),
        )),
    )
    .await;
    rig.vault.set(
        CredentialMeta::new(
            "deploy-api",
            CredentialKind::Basic {
                user: "deployer".to_owned(),
            },
            Binding::url(rig.upstream.url()),
        ),
        Secret::new(CANARY),
    );
    let r = rig.call("create_deployment", create("proj_1")).await;
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("deployer:{CANARY}"))
    );
    assert_eq!(
        rig.upstream.received()[0].header("authorization"),
        Some(expected.as_str())
    );
    // The upstream echoed it into a declared result field: the scrubber redacts it.
    assert_eq!(r.status, Status::Completed);
    let shown = r.data.as_ref().unwrap()["state"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        shown.starts_with("Basic ") && shown.contains("[REDACTED]"),
        "{shown}"
    );
    assert!(!shown.contains(&expected[6..]));
}

#[tokio::test]
async fn a_credential_bound_to_another_origin_is_refused_before_consent_and_sends_nothing() {
    let rig = rig_with(
        |_| Reply::Idempotent(None),
        |b| b,
        Some((CredentialKind::Bearer, "http://127.0.0.1:1".to_owned())),
    )
    .await;
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(RefusalCode::CredentialUnavailable.into()));
    assert!(
        r.reason
            .as_deref()
            .unwrap()
            .contains("not bound to this action's destination")
    );
    assert_eq!(rig.asks.load(Ordering::SeqCst), 0);
    assert_eq!(rig.upstream.requests(), 0);
    assert_eq!(rig.dispatches(&r), 0);
}

#[tokio::test]
async fn a_credential_over_plain_http_off_loopback_is_refused_before_consent() {
    let rig = rig_with(
        |_| Reply::Idempotent(None),
        |b| b.base_url("http://10.255.255.1:8080"),
        Some((
            CredentialKind::Bearer,
            "http://10.255.255.1:8080".to_owned(),
        )),
    )
    .await;
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(RefusalCode::CredentialUnavailable.into()));
    assert!(r.reason.as_deref().unwrap().contains("plain HTTP"));
    assert_eq!(rig.asks.load(Ordering::SeqCst), 0);
    assert_eq!(rig.dispatches(&r), 0);
}

#[tokio::test]
async fn an_api_key_in_the_query_is_sent_but_never_reaches_the_agent_or_the_audit() {
    let rig = rig_with(
        // The upstream echoes the full URL and the key in its body and error message.
        |r| Reply::Json(400, json!({"message": format!("bad request to http://x/{}?{} key={}", r.path, r.query.clone().unwrap_or_default(), CANARY)})),
        |b| b,
        None,
    )
    .await;
    rig.vault.set(
        CredentialMeta::new(
            "deploy-api",
            CredentialKind::ApiKey {
                placement: ApiKeyPlacement::Query("api_key".to_owned()),
            },
            Binding::url(rig.upstream.url()),
        ),
        Secret::new(CANARY),
    );
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::BadRequest.into()));
    assert_eq!(
        rig.upstream.received()[0].query.as_deref(),
        Some(format!("api_key={CANARY}").as_str())
    );
    assert!(
        r.reason.as_deref().unwrap().starts_with(
            "the upstream rejected the request (HTTP 400): bad request to [url] [redacted]"
        ),
        "{:?}",
        r.reason
    );
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(rig.dispatches(&r), 1);
}

// ---------------------------------------------------------------- failures before send

/// The same situation as `an_unreachable_host_is_connect_failed_as_over_http_and_nothing_is_sent`
/// in `ssh_channel.rs`: both channels say `connect_failed` (`sallyport_core::after_send`).
#[tokio::test]
async fn a_refused_connection_is_retried_for_a_non_idempotent_action_and_counts_zero_sends() {
    let rig = rig(|_| ok_resource()).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let rig = Rig {
        executor: executor_for(&rig, &format!("http://127.0.0.1:{port}"), |b| b),
        ..rig
    };
    let r = rig
        .call("send_invoice", json!({"invoice_id": "inv_1"}))
        .await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::ConnectFailed.into()));
    assert!(r.reason.as_deref().unwrap().contains("nothing was sent"));
    assert_eq!(rig.dispatches(&r), 0);
    assert_eq!(rig.audit(&r)["dispatches"], 0);
    assert_eq!(rig.upstream.requests(), 0);
}

#[tokio::test]
async fn a_dns_failure_counts_zero_sends() {
    let rig = rig(|_| ok_resource()).await;
    let rig = Rig {
        executor: executor_for(&rig, "http://no-such-host.invalid", |b| b),
        ..rig
    };
    let r = rig
        .call("send_invoice", json!({"invoice_id": "inv_1"}))
        .await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::ConnectFailed.into()));
    assert_eq!(rig.dispatches(&r), 0);
}

#[tokio::test]
async fn a_tls_failure_counts_zero_sends_and_the_plain_server_sees_no_request() {
    let rig = rig(|_| ok_resource()).await;
    // Speak TLS to a plain-HTTP server: the handshake fails before any request.
    let rig = Rig {
        executor: executor_for(&rig, &format!("https://{}", rig.upstream.addr), |b| b),
        ..rig
    };
    let r = rig
        .call("send_invoice", json!({"invoice_id": "inv_1"}))
        .await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::ConnectFailed.into()));
    assert_eq!(rig.dispatches(&r), 0);
    assert_eq!(rig.upstream.requests(), 0);
    assert_eq!(rig.upstream.connections(), 3);
}

fn executor_for(
    rig: &Rig,
    base: &str,
    configure: impl FnOnce(HttpChannelBuilder) -> HttpChannelBuilder,
) -> Executor {
    let channel = configure(
        HttpChannel::builder()
            .base_url(base)
            .backoff(Duration::from_millis(10), Duration::from_millis(40))
            .request_for::<SearchNotes>(),
    )
    .build()
    .expect("channel");
    let counter = Arc::clone(&rig.asks);
    Executor::builder(catalog())
        .journal(SqliteJournal::open(&rig.journal).expect("journal"))
        .vault_arc(rig.vault.clone())
        .consent(FnConsent::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { ConsentDecision::Approve }
        }))
        .channel(channel)
        .build()
        .expect("executor")
}

// ---------------------------------------------------------------- commit, then drop

async fn drop_rig(mode: Drop) -> Rig {
    rig_with(
        move |_| Reply::CommitThenDrop(mode),
        |b| b.total_timeout(Duration::from_secs(2)),
        None,
    )
    .await
}

/// `Drop::Reset` is the situation of `a_connection_killed_mid_command_is_unknown` in
/// `ssh_channel.rs`: both channels say `connection_lost_after_send`.
#[tokio::test(start_paused = true)]
async fn commit_then_drop_four_ways_without_a_key_is_unknown_sent_once_and_names_the_reconcile_action()
 {
    for (mode, code) in [
        (Drop::CleanClose, UpstreamCode::ConnectionLostAfterSend),
        (Drop::Reset, UpstreamCode::ConnectionLostAfterSend),
        (
            Drop::Hang(Duration::from_secs(10)),
            UpstreamCode::TimeoutAfterSend,
        ),
        (Drop::HalfWritten, UpstreamCode::ResponseTruncated),
    ] {
        let rig = drop_rig(mode).await;
        let r = rig
            .call("send_invoice", json!({"invoice_id": "inv_9"}))
            .await;
        assert_eq!(r.status, Status::Unknown, "{mode:?}");
        assert_eq!(r.code, Some(code.into()), "{mode:?}");
        assert!(
            r.reason
                .as_deref()
                .unwrap()
                .contains("do not retry; check with get_invoice"),
            "{:?}",
            r.reason
        );
        let next = r.next.as_ref().expect("next");
        assert_eq!(next.action, "get_invoice");
        assert_eq!(next.arguments, json!({"invoice_id": "inv_9"}));
        assert_eq!(rig.upstream.requests(), 1, "{mode:?}");
        assert_eq!(rig.upstream.effect_count(), 1, "{mode:?}");
        assert_eq!(rig.dispatches(&r), 1, "{mode:?}");
        assert_eq!(rig.audit(&r)["status"], "unknown");
    }
}

#[tokio::test(start_paused = true)]
async fn commit_then_drop_four_ways_with_a_key_resends_the_same_key_and_payload_and_commits_once() {
    for mode in [
        Drop::CleanClose,
        Drop::Reset,
        Drop::Hang(Duration::from_secs(10)),
        Drop::HalfWritten,
    ] {
        let rig = rig_with(
            move |r| Reply::Idempotent((r.n == 1).then_some(mode)),
            |b| b.total_timeout(Duration::from_secs(2)),
            None,
        )
        .await;
        let r = rig.call("create_deployment", create("proj_1")).await;
        assert_eq!(r.status, Status::Completed, "{mode:?}: {}", r.to_json());
        assert_eq!(
            r.data,
            Some(json!({"id": "res_1", "state": "created"})),
            "{mode:?}"
        );
        assert_eq!(rig.upstream.requests(), 2, "{mode:?}");
        assert_eq!(rig.upstream.effect_count(), 1, "{mode:?}");
        assert_eq!(rig.dispatches(&r), 2, "{mode:?}");
        let seen = rig.upstream.received();
        assert_eq!(
            seen[0].header("idempotency-key"),
            seen[1].header("idempotency-key")
        );
        assert_eq!(seen[0].body, seen[1].body);
        assert_eq!(seen[1].header("idempotency-key").map(str::len), Some(38));
    }
}

#[tokio::test]
async fn a_drop_after_the_full_request_but_before_the_commit_is_still_unknown_to_the_client() {
    let rig = rig(|_| Reply::DropBeforeCommit(Drop::CleanClose)).await;
    let r = rig
        .call("send_invoice", json!({"invoice_id": "inv_2"}))
        .await;
    assert_eq!(r.status, Status::Unknown);
    assert_eq!(r.code, Some(UpstreamCode::ConnectionLostAfterSend.into()));
    assert_eq!(rig.upstream.effect_count(), 0);
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(rig.dispatches(&r), 1);
}

#[tokio::test]
async fn no_log_line_carries_the_credential_or_the_url_with_the_api_key() {
    use std::io::Write;
    #[derive(Clone, Default)]
    struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // A global subscriber: every test of this binary logs into the sink from now on, so
    // the check below covers whatever else ran too.
    static SINK: std::sync::OnceLock<Sink> = std::sync::OnceLock::new();
    let sink = SINK
        .get_or_init(|| {
            let sink = Sink::default();
            let writer = sink.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_writer(move || writer.clone())
                .finish();
            tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
            sink
        })
        .clone();
    let rig = rig(|r| {
        if r.n == 1 {
            Reply::Idempotent(Some(Drop::Reset))
        } else {
            Reply::JsonWith(500, json!({"message": "boom"}), vec![])
        }
    })
    .await;
    rig.vault.set(
        CredentialMeta::new(
            "deploy-api",
            CredentialKind::ApiKey {
                placement: ApiKeyPlacement::Query("api_key".to_owned()),
            },
            Binding::url(rig.upstream.url()),
        ),
        Secret::new(CANARY),
    );
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::Unknown);
    assert_eq!(rig.upstream.requests(), 3);
    let logs = String::from_utf8_lossy(&sink.0.lock().unwrap()).into_owned();
    assert!(logs.contains("HTTP exchange failed"), "{logs}");
    assert_no_canary(&logs);
    assert!(!logs.contains("api_key="), "{logs}");
}

#[tokio::test(start_paused = true)]
async fn a_key_whose_original_is_still_in_flight_is_pending_with_idempotency_conflict() {
    let rig = rig_with(
        |_| Reply::IdempotentSlow(Duration::from_secs(30)),
        |b| b.total_timeout(Duration::from_secs(2)),
        None,
    )
    .await;
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::Pending);
    assert_eq!(r.code, Some(UpstreamCode::IdempotencyConflict.into()));
    assert_eq!(
        r.next.as_ref().map(|n| n.action.as_str()),
        Some("get_deployment")
    );
    assert_eq!(rig.upstream.requests(), 2);
    assert_eq!(rig.upstream.effect_count(), 1);
    assert_eq!(rig.dispatches(&r), 2);
}

#[tokio::test]
async fn a_key_reused_with_another_payload_is_rejected_with_idempotency_mismatch() {
    let rig = rig(|_| {
        Reply::Json(422, json!({"title": "Idempotency-Key reused with a different payload", "message": "idempotency key mismatch"}))
    })
    .await;
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::IdempotencyMismatch.into()));
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(rig.dispatches(&r), 1);
}

#[tokio::test]
async fn a_missing_key_answer_is_rejected_with_a_reason_naming_the_misconfigured_header() {
    let rig = rig_with(
        |_| Reply::Idempotent(None),
        |b| b.idempotency_header("X-Idem-Key", KeyQuoting::Bare),
        None,
    )
    .await;
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::IdempotencyKeyRequired.into()));
    assert!(
        r.reason.as_deref().unwrap().contains("header `x-idem-key`"),
        "{:?}",
        r.reason
    );
    assert!(r.reason.as_deref().unwrap().contains("misconfigured"));
    let seen = &rig.upstream.received()[0];
    assert_eq!(seen.header("x-idem-key").map(str::len), Some(36));
    assert_eq!(rig.upstream.requests(), 1);
}

// ---------------------------------------------------------------- auth

#[tokio::test]
async fn a_401_or_403_stops_marks_the_credential_unusable_until_it_is_rotated() {
    for code in [401u16, 403] {
        let rig =
            rig(move |_| Reply::Json(code, json!({"message": format!("token {CANARY} expired")})))
                .await;
        let r = rig.call("create_deployment", create("proj_1")).await;
        assert_eq!(r.status, Status::Rejected);
        assert_eq!(r.code, Some(UpstreamCode::AuthFailed.into()));
        assert_eq!(rig.upstream.requests(), 1, "no resend after {code}");
        assert_eq!(rig.dispatches(&r), 1);
        let again = rig.call("create_deployment", create("proj_1")).await;
        assert_eq!(again.code, Some(RefusalCode::CredentialUnavailable.into()));
        assert_eq!(rig.upstream.requests(), 1, "refused locally");
        rig.vault.set(
            CredentialMeta::new(
                "deploy-api",
                CredentialKind::Bearer,
                Binding::url(rig.upstream.url()),
            ),
            Secret::new(CANARY),
        );
        rig.upstream.set_behaviour(|_| Reply::Idempotent(None));
        let rotated = rig.call("create_deployment", create("proj_1")).await;
        assert_eq!(rotated.status, Status::Completed);
        assert_eq!(rig.upstream.requests(), 2);
    }
}

// ---------------------------------------------------------------- 429

fn limited(
    retry_after: Option<&str>,
) -> impl Fn(&sallyport_tests::http_server::Received) -> Reply + Send + Sync + 'static {
    let value = retry_after.map(str::to_owned);
    move |r| {
        if r.n == 1 {
            let headers = value
                .iter()
                .map(|v| ("retry-after".to_owned(), v.clone()))
                .chain([(
                    "date".to_owned(),
                    "Sun, 06 Nov 1994 08:49:37 GMT".to_owned(),
                )])
                .collect();
            Reply::JsonWith(429, json!({"message": "slow down"}), headers)
        } else {
            ok_resource()
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_seconds_waits_exactly_that_long_then_resends() {
    let rig = rig(limited(Some("7"))).await;
    let r = rig
        .call("get_deployment", json!({"deployment_id": "dep_1"}))
        .await;
    assert_eq!(r.status, Status::Completed);
    let seen = rig.upstream.received();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].at - seen[0].at, Duration::from_secs(7));
    assert_eq!(rig.dispatches(&r), 2);
}

#[tokio::test(start_paused = true)]
async fn a_429_with_an_http_date_waits_until_that_date_by_the_servers_clock() {
    let rig = rig(limited(Some("Sun, 06 Nov 1994 08:49:42 GMT"))).await;
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    let seen = rig.upstream.received();
    assert_eq!(seen[1].at - seen[0].at, Duration::from_secs(5));
    assert_eq!(
        seen[0].header("idempotency-key"),
        seen[1].header("idempotency-key")
    );
    assert_eq!(rig.dispatches(&r), 2);
}

#[tokio::test(start_paused = true)]
async fn a_429_without_a_usable_retry_after_within_the_cap_is_rejected_rate_limited() {
    for (value, delay) in [
        (None, None),
        (Some("-5"), None),
        (Some("soon"), None),
        (Some("999999"), Some(999_999)),
    ] {
        let rig = rig(limited(value)).await;
        let r = rig
            .call("get_deployment", json!({"deployment_id": "dep_1"}))
            .await;
        assert_eq!(r.status, Status::Rejected, "{value:?}");
        assert_eq!(r.code, Some(UpstreamCode::RateLimited.into()), "{value:?}");
        assert_eq!(
            r.data
                .as_ref()
                .and_then(|d| d["retry_after_seconds"].as_u64()),
            delay,
            "{value:?}"
        );
        assert_eq!(rig.upstream.requests(), 1, "{value:?}");
        assert_eq!(rig.dispatches(&r), 1);
    }
}

// ---------------------------------------------------------------- redirects

#[tokio::test]
async fn redirects_are_never_followed_cross_origin_to_http_or_to_a_metadata_address() {
    let elsewhere = Upstream::start(|_| ok_resource()).await;
    for location in [
        format!("{}/v1/stolen", elsewhere.url()),
        "http://api.example.com/v1/downgraded".to_owned(),
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/".to_owned(),
    ] {
        let loc = location.clone();
        let rig = rig_with(
            move |_| Reply::JsonWith(302, json!({}), vec![("location".to_owned(), loc.clone())]),
            |b| b,
            Some((
                CredentialKind::ApiKey {
                    placement: ApiKeyPlacement::Header("X-Api-Key".to_owned()),
                },
                String::new(),
            )),
        )
        .await;
        rig.vault.set(
            CredentialMeta::new(
                "deploy-api",
                CredentialKind::ApiKey {
                    placement: ApiKeyPlacement::Header("X-Api-Key".to_owned()),
                },
                Binding::url(rig.upstream.url()),
            ),
            Secret::new(CANARY),
        );
        let r = rig.call("create_deployment", create("proj_1")).await;
        assert_eq!(r.status, Status::Rejected, "{location}");
        assert_eq!(r.code, Some(UpstreamCode::RedirectRefused.into()));
        assert!(!r.to_json().contains("169.254") && !r.to_json().contains("example.com"));
        assert_eq!(rig.upstream.received()[0].header("x-api-key"), Some(CANARY));
        assert_eq!(rig.upstream.requests(), 1);
        assert_eq!(rig.dispatches(&r), 1);
    }
    assert_eq!(elsewhere.requests(), 0);
}

// ---------------------------------------------------------------- response mapping

#[tokio::test]
async fn a_business_error_inside_a_200_is_rejected_with_the_filtered_declared_message() {
    let rig = rig(|_| {
        Reply::Json(200, json!({"id": "dep_1", "state": "rejected",
            "message": "build not tested: see https://ci.internal/job/7 Traceback (most recent call last)",
            "debug": {"authorization": format!("Bearer {CANARY}")}}))
    })
    .await;
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::BusinessRejected.into()));
    let reason = r.reason.as_deref().unwrap();
    assert!(
        reason.starts_with(
            "the upstream declined the request: build not tested: see [url]; correlation id att_"
        ),
        "{reason}"
    );
    assert!(r.data.is_none());
}

#[tokio::test]
async fn a_202_is_pending_and_a_declared_409_is_already_in_desired_state() {
    let rig = rig(|r| {
        if r.n == 1 {
            Reply::Json(202, json!({"id": "dep_5", "state": "queued"}))
        } else {
            Reply::Json(409, json!({"message": "deployment exists"}))
        }
    })
    .await;
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::Pending);
    assert_eq!(r.data, Some(json!({"id": "dep_5", "state": "queued"})));
    let next = r.next.expect("next");
    assert_eq!(next.action, "get_deployment");
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::AlreadyInDesiredState);
    assert_eq!(rig.upstream.requests(), 2);
}

#[tokio::test]
async fn a_200_whose_body_misses_the_declared_result_is_never_completed() {
    let rig = rig(|_| Reply::Json(200, json!({"unexpected": true}))).await;
    let r = rig
        .call("send_invoice", json!({"invoice_id": "inv_1"}))
        .await;
    assert_eq!(r.status, Status::Unknown);
    assert_eq!(r.code, Some(UpstreamCode::UnexpectedResponse.into()));
    let r = rig
        .call("get_deployment", json!({"deployment_id": "d"}))
        .await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::UnexpectedResponse.into()));
}

#[tokio::test]
async fn a_500_on_a_call_without_a_key_is_unknown_after_one_request_and_shows_no_stack_trace() {
    let rig = rig(|_| {
        Reply::Json(500, json!({"message": "NullPointerException at com.corp.Billing.send(Billing.java:42)",
                                "trace": "at com.corp...", "url": "http://billing.internal:8080/send"}))
    })
    .await;
    let r = rig
        .call("send_invoice", json!({"invoice_id": "inv_1"}))
        .await;
    assert_eq!(r.status, Status::Unknown);
    assert_eq!(r.code, Some(UpstreamCode::UpstreamError.into()));
    let json = r.to_json();
    assert!(
        !json.contains("Billing.java")
            && !json.contains("billing.internal")
            && !json.contains("NullPointer")
    );
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(rig.dispatches(&r), 1);
}

#[tokio::test]
async fn a_503_on_an_idempotency_key_action_is_resent_with_the_same_key_up_to_three_requests() {
    let rig = rig(|_| Reply::Json(503, json!({}))).await;
    let r = rig.call("create_deployment", create("proj_1")).await;
    assert_eq!(r.status, Status::Unknown);
    assert_eq!(r.code, Some(UpstreamCode::GatewayError.into()));
    assert_eq!(rig.upstream.requests(), 3);
    assert_eq!(rig.dispatches(&r), 3);
    let seen = rig.upstream.received();
    assert!(
        seen.iter()
            .all(|s| s.header("idempotency-key") == seen[0].header("idempotency-key"))
    );
}

#[tokio::test]
async fn an_oversized_or_never_ending_body_is_cut_at_the_cap() {
    let rig = rig_with(
        |r| {
            if r.n == 1 {
                Reply::Raw(200, vec![], bytes::Bytes::from(vec![b'x'; 5 << 20]))
            } else {
                Reply::Trickle {
                    status: 200,
                    chunk: 16 * 1024,
                    every: Duration::ZERO,
                    chunks: usize::MAX,
                }
            }
        },
        |b| b.max_response_bytes(64 * 1024).max_attempts(1),
        None,
    )
    .await;
    let r = rig
        .call("get_deployment", json!({"deployment_id": "d"}))
        .await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::ResponseTooLarge.into()));
    let r = rig
        .call("get_deployment", json!({"deployment_id": "d"}))
        .await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::ResponseTooLarge.into()));
    assert_eq!(rig.upstream.requests(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_trickling_body_hits_the_total_timeout_and_an_observe_call_resends_up_to_three_times() {
    let rig = rig_with(
        |_| Reply::Trickle {
            status: 200,
            chunk: 1,
            every: Duration::from_secs(1),
            chunks: 1000,
        },
        |b| b.total_timeout(Duration::from_secs(5)),
        None,
    )
    .await;
    let r = rig
        .call("get_deployment", json!({"deployment_id": "d"}))
        .await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::TimeoutAfterSend.into()));
    assert_eq!(rig.upstream.requests(), 3);
    assert_eq!(rig.dispatches(&r), 3);
}

#[tokio::test]
async fn a_call_cancelled_after_its_request_left_is_recorded_unknown_with_one_dispatch() {
    let rig = drop_rig(Drop::Hang(Duration::from_secs(3600))).await;
    let session = Session::new("s1");
    let call = rig
        .executor
        .call("send_invoice", json!({"invoice_id": "inv_1"}), &session);
    let _ = tokio::time::timeout(Duration::from_millis(500), call).await;
    // The cancellation is appended by the journal thread, detached from the dropped call.
    let mut found = None;
    for _ in 0..200 {
        let records = rig.executor.journal().records().await.expect("records");
        found = records
            .into_iter()
            .find(|r| r.event.code == Some(UpstreamCode::CancelledAfterSend.into()));
        if found.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let all = rig.executor.journal().records().await.expect("records");
    let event = found
        .unwrap_or_else(|| {
            panic!(
                "no cancellation record: {:?}",
                all.iter()
                    .map(|r| (&r.event.phase, &r.event.code))
                    .collect::<Vec<_>>()
            )
        })
        .event;
    assert_eq!(event.status, Status::Unknown);
    assert_eq!(event.dispatches, 1);
    assert_eq!(rig.upstream.requests(), 1);
}

// ---------------------------------------------------------------- probe

type Behaviour = Box<dyn Fn(&sallyport_tests::http_server::Received) -> Reply + Send + Sync>;

#[tokio::test]
async fn the_idempotency_probe_tells_honouring_ignoring_and_double_executing_upstreams_apart() {
    let spec = CreateDeployment::spec();
    let vault = MemoryVault::new();
    let cases: Vec<(Behaviour, ProbeVerdict, RepeatBehaviour)> = vec![
        (
            Box::new(|_| Reply::Idempotent(None)),
            ProbeVerdict::Honoured,
            RepeatBehaviour::Replayed,
        ),
        (
            Box::new(|r| {
                Reply::Json(
                    201,
                    json!({"id": format!("res_{}", r.n), "state": "created"}),
                )
            }),
            ProbeVerdict::ExecutesBoth,
            RepeatBehaviour::ExecutedAgain,
        ),
        (
            Box::new(|_| Reply::Json(201, json!({"id": "res_1", "state": "created"}))),
            ProbeVerdict::IgnoresPayloadChanges,
            RepeatBehaviour::Replayed,
        ),
    ];
    for (behaviour, verdict, repeat) in cases {
        let upstream = Upstream::start(behaviour).await;
        vault.set(
            CredentialMeta::new(
                "deploy-api",
                CredentialKind::Bearer,
                Binding::url(upstream.url()),
            ),
            Secret::new(CANARY),
        );
        let credential = sallyport_core::vault::Vault::resolve(&vault, "deploy-api")
            .await
            .unwrap();
        let channel = HttpChannel::builder().build().unwrap();
        let report = channel
            .probe_idempotency(
                &spec,
                &create("proj_1"),
                &json!({"project_id": "proj_1", "build_id": "build_8"}),
                Some(&credential),
            )
            .await
            .unwrap();
        assert_eq!(report.verdict, verdict);
        assert_eq!(report.repeat, repeat);
        assert_eq!(upstream.requests(), 3);
    }
}

#[tokio::test]
async fn refusals_use_executor_origin_and_codes() {
    let rig = rig(|_| ok_resource()).await;
    let r = rig
        .call("get_deployment", json!({"deployment_id": ".."}))
        .await;
    assert_eq!(r.origin, Some(sallyport_core::outcome::Origin::Executor));
    assert_eq!(r.code, Some(RefusalCode::InvalidRequest.into()));
}

#[tokio::test]
async fn sequential_calls_reuse_one_pooled_keep_alive_connection() {
    let rig = rig(|_| ok_resource()).await;
    for _ in 0..20 {
        let r = rig
            .call("get_deployment", json!({"deployment_id": "dep_1"}))
            .await;
        assert_eq!(r.status, Status::Completed);
    }
    assert_eq!(rig.upstream.requests(), 20);
    assert_eq!(rig.upstream.connections(), 1);
}
