//! What the approver sees, over a real listener, a real SQLite journal file and a local
//! upstream that counts requests: every header of the request with its value (never the API
//! key the vault attaches as a header at dispatch), denied and expired cards that say the
//! request was never sent, a late approver told an approval expired (not that someone
//! decided first), the call page's audit JSON with bidi and tag characters made visible, and
//! login attempts throttled per client address.

use crate::common;

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sallyport_console::{Console, LoginToken};
use sallyport_core::approval::{self, ApprovalId, ApprovalState, ConsentMode, Decider, Verdict};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::ActionResult;
use sallyport_core::vault::{
    ApiKeyPlacement, Binding, CredentialKind, CredentialMeta, MemoryVault, Secret,
};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Reply, Upstream};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use common::{Answer, LOGIN, Rig, rig_with, try_login_from};

/// The API key the vault attaches as `X-Api-Key` at dispatch (a canary: never on a page).
pub(crate) const API_KEY: &str = "hk-console-Canary/7+Zq=9x";

/// What the agent puts in the `X-Refund-Note` header.
pub(crate) const NOTE: &str = "duplicate charge, said \"Ann\"";

/// Refund one charge; the agent's note goes upstream as a header.
#[derive(Debug, Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "refund_charge", effect = external_commitment, credential = "header-api")]
#[http(post = "/v1/charges/{charge_id}/refunds", header("X-Refund-Note" = note), result = Refund)]
#[serde(deny_unknown_fields)]
pub(crate) struct RefundCharge {
    charge_id: String,
    note: String,
    /// Why the agent wants this.
    #[audit_note]
    reason: String,
}

/// A refund as the upstream answers.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub(crate) struct Refund {
    id: String,
}

/// A deferred-consent executor holding `refund_charge` over the journal at `journal`.
pub(crate) fn header_executor(
    journal: &Path,
    vault: Arc<MemoryVault>,
    expiry: Duration,
) -> Executor {
    Executor::builder(
        Catalog::builder()
            .action::<RefundCharge>()
            .build()
            .expect("catalog"),
    )
    .journal(SqliteJournal::open(journal).expect("journal"))
    .vault_arc(vault)
    .channel(
        HttpChannel::builder()
            .backoff(Duration::from_millis(5), Duration::from_millis(10))
            .build()
            .expect("channel"),
    )
    .consent_mode(ConsentMode::Deferred)
    .approval_expiry(expiry)
    .build()
    .expect("executor")
}

/// The rig with `refund_charge` and a header API key, its console served on 127.0.0.1:0.
pub(crate) async fn header_rig() -> Rig {
    let upstream = Upstream::start(|_| Reply::Json(201, json!({"id": "re_1"}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "header-api",
            CredentialKind::ApiKey {
                placement: ApiKeyPlacement::Header("X-Api-Key".into()),
            },
            Binding::url(upstream.url()),
        ),
        Secret::new(API_KEY),
    );
    let executor = header_executor(
        &dir.path().join("journal.db"),
        Arc::clone(&vault),
        approval::DEFAULT_EXPIRY,
    );
    let console = Console::builder(executor.clone())
        .user("alice", LoginToken::new(LOGIN).expect("token"))
        .build()
        .expect("console");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { console.serve(listener).await });
    Rig {
        upstream,
        executor,
        vault,
        addr,
        _dir: dir,
    }
}

/// The agent's `refund_charge` of charge `n` with `reason`, parked: its approval id and the
/// pending result.
pub(crate) async fn park_refund(
    executor: &Executor,
    n: usize,
    reason: &str,
) -> (ApprovalId, ActionResult) {
    let result = executor
        .call(
            "refund_charge",
            json!({"charge_id": format!("ch_{n}"), "note": NOTE, "reason": reason}),
            &Session::new("agent-1").requested_by("billing-bot"),
        )
        .await;
    assert_eq!(result.status, Status::Pending, "{}", result.to_json());
    (result.approval_id.clone().expect("approval id"), result)
}

/// The request of charge `n` as the approver must read it (HTML entities decoded).
pub(crate) fn shown_request(rig: &Rig, n: usize) -> String {
    format!(
        "POST {}/v1/charges/ch_{n}/refunds headers: x-refund-note: \"duplicate charge, said \\\"Ann\\\"\" body: {{}}",
        rig.upstream.url()
    )
}

/// `html` with the entities maud writes decoded.
pub(crate) fn decoded(html: &str) -> String {
    html.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The API key in the forms a page could carry it: raw, JSON-escaped, percent-encoded,
/// base64 and hex.
fn key_forms() -> Vec<String> {
    use base64::Engine as _;
    let json = serde_json::to_string(API_KEY).expect("json");
    vec![
        API_KEY.to_owned(),
        json[1..json.len() - 1].to_owned(),
        API_KEY
            .replace('/', "%2F")
            .replace('+', "%2B")
            .replace('=', "%3D"),
        base64::engine::general_purpose::STANDARD.encode(API_KEY),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(API_KEY),
        hex::encode(API_KEY),
    ]
}

pub(crate) fn assert_no_key(what: &str, text: &str) {
    for form in key_forms() {
        assert!(
            !text.contains(&form),
            "{what} carries the API key as {form:?}"
        );
    }
    assert!(
        !text.to_ascii_lowercase().contains("x-api-key"),
        "{what} names the credential's header"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_header_value_is_shown_to_the_approver_and_the_credential_header_never() {
    let rig = header_rig().await;
    let (id, parked) = park_refund(&rig.executor, 1, "the customer asked twice").await;
    assert_eq!(rig.upstream.requests(), 0);
    let (cookie, csrf) = rig.login().await;
    let page = format!("/approvals/{}", id.as_str());
    for path in ["/approvals", page.as_str()] {
        let answer = rig.get(path, Some(&cookie)).await;
        assert_eq!(answer.status, 200);
        let body = decoded(&answer.body);
        assert!(body.contains(&shown_request(&rig, 1)), "{path}: {body}");
        assert!(
            body.contains("Request, exactly as it will be sent"),
            "{path}"
        );
        assert_no_key(path, &answer.body);
    }
    // The parked call's audit record holds the same request.
    let receipt = parked.receipt_id.expect("receipt");
    let call = rig
        .get(&format!("/calls/{}", receipt.as_str()), Some(&cookie))
        .await;
    assert_eq!(call.status, 200);
    assert!(decoded(&call.body).contains(&shown_request(&rig, 1)));
    assert_no_key("the call page", &call.body);

    let answer = rig
        .post(
            &format!("{page}/decide"),
            Some(&cookie),
            &[("csrf", &csrf), ("verdict", "approve")],
        )
        .await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(
        answer.header("location"),
        Some(format!("{page}?done=recorded").as_str())
    );
    // Sent once, with the value the approver read and the key the vault attached.
    assert_eq!(rig.upstream.requests(), 1);
    let sent = &rig.upstream.received()[0];
    assert_eq!(sent.header("x-refund-note"), Some(NOTE));
    assert_eq!(sent.header("x-api-key"), Some(API_KEY));

    let decided = rig.get(&page, Some(&cookie)).await;
    let body = decoded(&decided.body);
    assert!(body.contains("Request, as approved"), "{body}");
    assert!(body.contains(&shown_request(&rig, 1)), "{body}");
    assert!(body.contains("completed"), "{body}");
    assert_no_key("the decided approval", &decided.body);
    for record in rig.journal().records().await.expect("records") {
        let text = serde_json::to_string(&record).expect("json");
        assert_no_key("an audit record", &text);
        let shown = rig
            .get(
                &format!("/calls/{}", record.event.receipt_id.as_str()),
                Some(&cookie),
            )
            .await;
        assert_eq!(shown.status, 200);
        assert_no_key("a call page", &shown.body);
    }
    let export = rig.get("/chain/export", Some(&cookie)).await;
    assert_eq!(export.status, 200);
    assert_no_key("the export", &export.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_and_expired_cards_say_the_request_was_never_sent() {
    let rig = header_rig().await;
    let journal = rig._dir.path().join("journal.db");
    // Another executor on the same journal parks calls that expire at once.
    let hasty = header_executor(&journal, Arc::clone(&rig.vault), Duration::from_millis(50));
    let (denied, _) = park_refund(&rig.executor, 1, "first").await;
    let (lapsed, _) = park_refund(&hasty, 2, "second").await;
    let (recorded_by_cli, _) = park_refund(&hasty, 3, "third").await;
    tokio::time::sleep(Duration::from_millis(120)).await;
    let (cookie, csrf) = rig.login().await;

    // Denied: the request is what would have been sent.
    let answer = rig
        .post(
            &format!("/approvals/{}/decide", denied.as_str()),
            Some(&cookie),
            &[("csrf", &csrf), ("verdict", "deny"), ("reason", "not ours")],
        )
        .await;
    assert_eq!(answer.status, 303);
    let page = rig
        .get(&format!("/approvals/{}", denied.as_str()), Some(&cookie))
        .await;
    assert!(
        page.body.contains("Request (never sent: denied)"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("Request, as approved"), "{}", page.body);
    assert!(!page.body.contains("exactly as it will be sent"));

    // Past its expiry, not yet recorded as expired: no form, and never "as approved".
    let page = rig
        .get(&format!("/approvals/{}", lapsed.as_str()), Some(&cookie))
        .await;
    assert!(
        page.body.contains("Request (never sent: it expired)"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("name=\"verdict\""),
        "no form on an expired card"
    );
    assert!(!page.body.contains("Request, as approved"));

    // A late approver is told it expired: they are first to see it, the expiry is recorded.
    let answer = rig
        .post(
            &format!("/approvals/{}/decide", lapsed.as_str()),
            Some(&cookie),
            &[("csrf", &csrf), ("verdict", "approve")],
        )
        .await;
    assert_eq!(
        answer.header("location"),
        Some(format!("/approvals/{}?done=expired", lapsed.as_str()).as_str())
    );
    let store = rig.store();
    assert_eq!(
        store
            .approval(&lapsed)
            .await
            .expect("read")
            .expect("stored")
            .state,
        ApprovalState::Expired
    );

    // The expiry recorded elsewhere first (a CLI decision came too late): the console's
    // late approver is still told it expired, never that someone decided first.
    let cli = approval::decide(
        store.as_ref(),
        &recorded_by_cli,
        Verdict::Deny,
        &Decider::new("bob", "cli"),
        None,
    )
    .await
    .expect("decide");
    assert!(matches!(cli, approval::Decided::Expired(_)), "{cli:?}");
    let answer = rig
        .post(
            &format!("/approvals/{}/decide", recorded_by_cli.as_str()),
            Some(&cookie),
            &[("csrf", &csrf), ("verdict", "approve")],
        )
        .await;
    let location = answer.header("location").expect("location").to_owned();
    assert_eq!(
        location,
        format!("/approvals/{}?done=expired", recorded_by_cli.as_str())
    );
    let page = rig.get(&location, Some(&cookie)).await;
    assert!(
        page.body.contains("It had expired before your decision"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("Someone decided first"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("Request (never sent: it expired)"),
        "{}",
        page.body
    );
    // The list shows each card with its own label.
    let list = rig.get("/approvals", Some(&cookie)).await;
    assert!(!list.body.contains("Request, as approved"), "{}", list.body);
    assert_eq!(rig.upstream.requests(), 0, "nothing was sent");
    // Expiry is never a denial: the expired approvals hold no decision.
    for id in [&lapsed, &recorded_by_cli] {
        let a = store.approval(id).await.expect("read").expect("stored");
        assert_eq!(a.state, ApprovalState::Expired);
        assert!(a.decision.is_none(), "{a:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_page_shows_bidi_and_tag_characters_in_the_audit_json_as_escapes() {
    let rig = header_rig().await;
    let reason = "refund \u{202e}fdp.exe\u{2066} \u{e0041}\u{e0042}\u{e007f} tagged\u{200b}";
    let (_, parked) = park_refund(&rig.executor, 4, reason).await;
    let (cookie, _) = rig.login().await;
    let receipt = parked.receipt_id.expect("receipt");
    let page = rig
        .get(&format!("/calls/{}", receipt.as_str()), Some(&cookie))
        .await;
    assert_eq!(page.status, 200);
    for c in [
        '\u{202e}',
        '\u{2066}',
        '\u{e0041}',
        '\u{e0042}',
        '\u{e007f}',
        '\u{200b}',
    ] {
        assert!(!page.body.contains(c), "raw {c:?} on the call page");
    }
    let json_start = page
        .body
        .find("<pre class=\"json\">")
        .expect("the audit JSON");
    let json = decoded(&page.body[json_start..]);
    assert!(
        json.contains(
            "\"note\": \"refund \\u{202e}fdp.exe\\u{2066} \\u{e0041}\\u{e0042}\\u{e007f} tagged\\u{200b}\""
        ),
        "{json}"
    );
    // The export keeps the exact bytes for programs.
    let export = rig.get("/chain/export", Some(&cookie)).await;
    assert!(export.body.contains(reason));
}

async fn wrong_then(rig: &Rig, from: Option<IpAddr>, token: &str) -> Answer {
    try_login_from(from, rig.addr, token).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_attempts_are_throttled_per_client_address() {
    let rig = rig_with(|executor| {
        Console::builder(executor.clone()).login_throttle(3, Duration::from_millis(800))
    })
    .await;
    let here: IpAddr = "127.0.0.1".parse().expect("ip");
    let other: IpAddr = "127.0.0.2".parse().expect("ip");
    for _ in 0..3 {
        let wrong = wrong_then(&rig, Some(here), "not-the-console-login-token-at-all").await;
        assert_eq!(wrong.status, 303);
        assert_eq!(wrong.header("location"), Some("/login?failed=1"));
    }
    // The fourth attempt is refused unseen, the right token too.
    let refused = wrong_then(&rig, Some(here), LOGIN).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(refused.cookie("sallyport_console").is_none());
    assert!(
        refused.body.contains("Too many login attempts"),
        "{}",
        refused.body
    );
    // Another client is not affected.
    let ok = wrong_then(&rig, Some(other), LOGIN).await;
    assert_eq!(ok.status, 303);
    assert_eq!(ok.header("location"), Some("/approvals"));
    assert!(ok.cookie("sallyport_console").is_some());
    // Once the window has passed, the first client may try again.
    tokio::time::sleep(Duration::from_millis(850)).await;
    let ok = wrong_then(&rig, Some(here), LOGIN).await;
    assert_eq!(ok.status, 303, "{}", ok.body);
    assert!(ok.cookie("sallyport_console").is_some());
}
