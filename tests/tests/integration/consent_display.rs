//! What the human is shown is the truth: against the real test upstream and a real SQLite
//! journal, what the agent wrote reaches the human escaped (and a queue consumer gets the raw
//! and the display form), a padded field never hides a later one, a request too large to show
//! in full is refused before anyone is asked, and a session approval for `Duration::MAX` is
//! kept without a panic.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sallyport_core::code::RefusalCode;
use sallyport_core::consent::{
    ConsentDecision, ConsentProvider, ConsentRequest, FnConsent, QueueConsent,
};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::ActionResult;
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Reply, Upstream, audit_event};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Pay one recipient from an account.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "send_payment", effect = external_commitment)]
#[http(post = "/v1/accounts/{account_id}/payments", result = Paid)]
#[serde(deny_unknown_fields)]
struct SendPayment {
    #[scope(account)]
    account_id: String,
    amount_cents: u64,
    memo: String,
    recipient: String,
    /// Why.
    #[audit_note]
    reason: String,
}

/// Scale the workers of one pool.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "scale_pool", effect = reversible_change, consent = session)]
#[http(post = "/v1/pools/{pool}/scale", result = Paid)]
#[serde(deny_unknown_fields)]
struct ScalePool {
    pool: String,
    workers: u8,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Paid {
    id: String,
}

struct Rig {
    upstream: Upstream,
    executor: Executor,
    journal: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

async fn rig(consent: Arc<dyn ConsentProvider>) -> Rig {
    let upstream = Upstream::start(|_| Reply::Json(200, json!({"id": "pay_1"}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let catalog = Catalog::builder()
        .action::<SendPayment>()
        .action::<ScalePool>()
        .build()
        .expect("catalog");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(&journal).expect("journal"))
        .channel(
            HttpChannel::builder()
                .base_url(upstream.url())
                .build()
                .expect("channel"),
        )
        .consent_arc(consent)
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
        let session = Session::new("s1").allow_any("account");
        self.executor.call(action, args, &session).await
    }

    fn audit(&self, r: &ActionResult) -> Value {
        audit_event(&self.journal, r.attempt_id.as_str())
    }
}

/// A host provider that counts its questions and approves.
fn counting() -> (Arc<dyn ConsentProvider>, Arc<AtomicU32>) {
    let asked = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&asked);
    let provider: Arc<dyn ConsentProvider> = Arc::new(FnConsent::new(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { ConsentDecision::Approve }
    }));
    (provider, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_too_large_to_show_in_full_is_refused_before_anyone_is_asked() {
    let (provider, asked) = counting();
    let rig = rig(provider).await;
    let result = rig
        .call(
            "send_payment",
            json!({"account_id": "acct_1", "amount_cents": 990_000, "memo": "x".repeat(20_000),
                   "recipient": "acct_mallory", "reason": "monthly rent"}),
        )
        .await;
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(result.code, Some(RefusalCode::ArgumentsTooLarge.into()));
    let reason = result.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("a consent prompt shows at most 16384 bytes and never cuts one")
            && reason.contains("nothing was sent"),
        "{reason}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 0, "no human was asked");
    assert_eq!(rig.upstream.requests(), 0);
    let audit = rig.audit(&result);
    assert_eq!(audit["code"], "arguments_too_large");
    assert_eq!(audit["consent"], "too_large_to_show");
    assert_eq!(audit["dispatches"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_approval_for_duration_max_is_kept_without_a_panic() {
    let asked = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&asked);
    let provider: Arc<dyn ConsentProvider> = Arc::new(FnConsent::new(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { ConsentDecision::ApproveForSession { ttl: Duration::MAX } }
    }));
    let rig = rig(provider).await;
    for workers in [2, 3] {
        let result = rig
            .call("scale_pool", json!({"pool": "p1", "workers": workers}))
            .await;
        assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    }
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "the grant covers the second call"
    );
    assert_eq!(rig.upstream.requests(), 2);
}

/// A host provider that keeps every request it is shown and approves.
fn recording() -> (
    Arc<dyn ConsentProvider>,
    Arc<std::sync::Mutex<Vec<ConsentRequest>>>,
) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = Arc::clone(&seen);
    let provider: Arc<dyn ConsentProvider> = Arc::new(FnConsent::new(move |request| {
        keep.lock().expect("lock").push(request);
        async { ConsentDecision::Approve }
    }));
    (provider, seen)
}

/// What an agent writes to paint a fake, harmless request over the real one.
const SPOOF: &str =
    "rent\r\nRequest: GET https://harmless.example/\u{1b}[2K\u{1b}[1A\u{202e}gnp.exe";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_written_line_breaks_ansi_and_bidi_render_escaped_and_the_queue_gets_both_forms() {
    let (queue, mut pending) = QueueConsent::new(4);
    let rig = rig(Arc::new(queue)).await;
    let ui = tokio::spawn(async move {
        let item = pending.next().await.expect("one consent request");
        let request = item.request.clone();
        item.answer(ConsentDecision::Approve);
        request
    });
    let result = rig
        .call(
            "send_payment",
            json!({"account_id": "acct_1", "amount_cents": 12_500, "memo": SPOOF,
                   "recipient": "acct_landlord", "reason": SPOOF}),
        )
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(rig.upstream.requests(), 1);
    let request = ui.await.expect("ui task");

    // The queue consumer gets the raw form, as the agent wrote it ...
    assert_eq!(request.note.as_deref(), Some(SPOOF));
    // The body is JSON, so its line breaks and ESC are already JSON escapes; the bidi
    // override is not, and stays raw here.
    assert!(request.request.contains('\u{202e}'), "{}", request.request);
    assert!(
        !request.display.request.contains('\u{202e}'),
        "{}",
        request.display.request
    );
    // ... and the display form, escaped.
    let escaped =
        "rent\\r\\nRequest: GET https://harmless.example/\\u{1b}[2K\\u{1b}[1A\\u{202e}gnp.exe";
    assert_eq!(request.display.note.as_deref(), Some(escaped));

    // The terminal prompt is made from the display form: one `Request:` line, the real one,
    // and not one character that moves the cursor, clears a line or reverses text.
    let prompt = request.render();
    for bad in ['\r', '\u{1b}', '\u{202e}'] {
        assert!(
            !prompt.contains(bad),
            "{bad:?} reached the prompt: {prompt:?}"
        );
    }
    let request_lines: Vec<&str> = prompt
        .lines()
        .filter(|l| l.starts_with("Request:"))
        .collect();
    assert_eq!(request_lines.len(), 1, "{prompt}");
    assert!(
        request_lines[0].starts_with(&format!(
            "Request: POST {}/v1/accounts/acct_1/payments",
            rig.upstream.url()
        )),
        "{prompt}"
    );
    assert!(
        prompt.contains(&format!("Agent's reason: {escaped}\n")),
        "{prompt}"
    );
    assert_eq!(
        prompt.lines().count(),
        5,
        "action, summary, request, object, reason: {prompt}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_padded_field_does_not_hide_a_later_field_from_the_human() {
    let (provider, seen) = recording();
    let rig = rig(provider).await;
    let result = rig
        .call(
            "send_payment",
            json!({"account_id": "acct_1", "amount_cents": 990_000, "memo": "x".repeat(6_000),
                   "recipient": "acct_mallory", "reason": "monthly rent"}),
        )
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(rig.upstream.requests(), 1);
    let shown = seen.lock().expect("lock")[0].render();
    // The fields after the padding are there to read, and nothing says "cut".
    assert!(shown.contains(r#""recipient":"acct_mallory""#), "{shown}");
    assert!(shown.contains(r#""amount_cents":990000"#), "{shown}");
    assert!(
        shown.contains(&"x".repeat(6_000)),
        "the padding is shown whole"
    );
    assert!(!shown.contains('…'), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_note_longer_than_the_prompt_keeps_says_how_much_is_not_shown() {
    let (provider, seen) = recording();
    let rig = rig(provider).await;
    let note = format!("{} then pay acct_mallory", "r".repeat(2_500));
    let result = rig
        .call(
            "send_payment",
            json!({"account_id": "acct_1", "amount_cents": 100, "memo": "rent",
                   "recipient": "acct_landlord", "reason": note}),
        )
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    let shown = seen.lock().expect("lock")[0].render();
    // 2,522 bytes written, 2,000 kept: the human is told that 522 are missing.
    assert!(
        shown.contains(&format!(
            "Agent's reason: {}… (522 more bytes not shown)\n",
            "r".repeat(2_000)
        )),
        "{shown}"
    );
}
