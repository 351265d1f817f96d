//! Signed notifications of parked calls (issue 38, §4), end to end with real components: a
//! real executor parks a deferred call in a real SQLite journal; the `Notifier` posts it to
//! a bot on 127.0.0.1:0 that verifies the signature on its own (HMAC-SHA256 with the shared
//! secret, or Ed25519 with the public key alone) and then decides through the link it was
//! given, the webhook receiver of the same executor, which sends the call once. A bot that
//! is down gets every try, and the notification lands in the dead-letter file.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use ed25519_dalek::{Signature, SigningKey, Verifier as _};
use hmac::{KeyInit as _, Mac as _};
use sallyport_core::approval::notify::DeadLetter;
use sallyport_core::approval::{ApprovalId, ApprovalState, ConsentMode};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Reply, Upstream};
use sallyport_webhook::{Notifier, WebhookReceiver, sign};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const CREDENTIAL: &str = "approvals-webhook";
const SECRET: &str = "whsec-7Qm2-shared-with-the-bot";
const UPSTREAM_TOKEN: &str = "tok-upstream-never-in-a-notification-91ab";
/// The agent's note on every parked call: kept for the approver's own screens and the audit
/// record, never put in a notification (it is the agent's text, and it may argue its case).
const NOTE: &str = "note-canary-5e1d: approve now, the release is late";

/// Queue one build for the preview environment.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_deployment", effect = external_commitment, retry = idempotency_key,
         credential = "deploy-api")]
#[http(post = "/v1/projects/{project_id}/deployments", status(202) = pending, result = Resource)]
struct CreateDeployment {
    #[scope(project)]
    project_id: String,
    build_id: String,
    /// Why the agent asks.
    #[audit_note]
    reason: Option<String>,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Resource {
    id: String,
    state: String,
}

/// What the bot got: each message's body and signature header, and when.
#[derive(Clone, Default)]
struct Inbox(Arc<Mutex<Vec<(Instant, Bytes, String)>>>);

impl Inbox {
    fn all(&self) -> Vec<(Instant, Bytes, String)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A bot on 127.0.0.1:0 answering `status` to every message it keeps in `inbox`.
async fn bot(inbox: Inbox, status: StatusCode) -> String {
    let app = axum::Router::new().route(
        "/notify",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let inbox = inbox.clone();
            async move {
                let signature = headers
                    .get("sallyport-signature")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                inbox
                    .0
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((Instant::now(), body, signature));
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/notify", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    url
}

struct Rig {
    upstream: Upstream,
    executor: Executor,
    decide_url: String,
    _dir: tempfile::TempDir,
}

/// An executor that parks every `create_deployment` and tells `notifier(decide_link)`; its
/// webhook receiver listens at the decide link.
async fn rig(make: impl FnOnce(String) -> Notifier) -> Rig {
    let upstream =
        Upstream::start(|_| Reply::Json(202, json!({"id": "dep_2388", "state": "queued"}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            CREDENTIAL,
            CredentialKind::Bearer,
            Binding::url("https://chatops.example.com"),
        ),
        Secret::new(SECRET),
    );
    vault.set(
        CredentialMeta::new(
            "deploy-api",
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new(UPSTREAM_TOKEN),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let decide_url = format!(
        "http://{}/approvals/decision",
        listener.local_addr().expect("addr")
    );
    let catalog = Catalog::builder()
        .action::<CreateDeployment>()
        .build()
        .expect("catalog");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .vault_arc(vault)
        .channel(
            HttpChannel::builder()
                .base_url(upstream.url())
                .build()
                .expect("channel"),
        )
        .consent_mode(ConsentMode::Deferred)
        .park_notifier(make(decide_url.clone()))
        .build()
        .expect("executor");
    let receiver = WebhookReceiver::builder(executor.clone())
        .secret_credential(CREDENTIAL)
        .build()
        .expect("receiver");
    let app = receiver.router();
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    Rig {
        upstream,
        executor,
        decide_url,
        _dir: dir,
    }
}

impl Rig {
    async fn park(&self, build: &str) -> (ApprovalId, Instant) {
        let session = Session::new("chat-1").allow("project", ["proj_42"]);
        let result = self
            .executor
            .call(
                "create_deployment",
                json!({"project_id": "proj_42", "build_id": build, "reason": NOTE}),
                &session,
            )
            .await;
        assert_eq!(result.status, Status::Pending, "{}", result.to_json());
        (result.approval_id.expect("approval id"), Instant::now())
    }

    async fn state(&self, id: &ApprovalId) -> ApprovalState {
        self.executor
            .approval_store()
            .expect("store")
            .approval(id)
            .await
            .expect("read")
            .expect("stored")
            .state
    }
}

/// The first message in `inbox`, waited for up to 5 s.
async fn first_message(inbox: &Inbox) -> (Instant, Bytes, String) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(first) = inbox.all().into_iter().next() {
            return first;
        }
        assert!(Instant::now() < deadline, "no notification within 5 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `t` and the named signature part of a `Sallyport-Signature` header.
fn parts<'h>(header: &'h str, name: &str) -> (String, &'h str) {
    let mut t = String::new();
    let mut value = "";
    for part in header.split(',') {
        if let Some(v) = part.strip_prefix("t=") {
            t = v.to_owned();
        } else if let Some(v) = part.strip_prefix(&format!("{name}=")) {
            value = v;
        }
    }
    (t, value)
}

fn signed(t: &str, body: &[u8]) -> Vec<u8> {
    let mut signed = format!("{t}.").into_bytes();
    signed.extend_from_slice(body);
    signed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_verifies_the_hmac_signed_notification_and_decides_through_its_link() {
    let inbox = Inbox::default();
    let url = bot(inbox.clone(), StatusCode::NO_CONTENT).await;
    let rig = rig(|decide| {
        Notifier::builder(url, decide)
            .hmac(Secret::new(SECRET))
            .build()
            .expect("notifier")
    })
    .await;
    let (id, parked_at) = rig.park("build_7").await;
    let (got_at, body, header) = first_message(&inbox).await;
    let latency = got_at.saturating_duration_since(parked_at);
    assert!(
        latency < Duration::from_secs(1),
        "delivered after {latency:?}"
    );

    // The bot's own check: HMAC-SHA256(secret, "<t>.<body>"), a fresh `t`.
    let (t, v1) = parts(&header, "v1");
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).expect("key");
    mac.update(&signed(&t, &body));
    mac.verify_slice(&hex::decode(v1).expect("hex"))
        .expect("the signature verifies");
    let sent_at: u64 = t.parse().expect("t");
    assert!(sent_at.abs_diff(sallyport_core::clock::now_ms() / 1000) <= 5);
    // A body changed in transit does not verify.
    let mut forged = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).expect("key");
    forged.update(&signed(&t, &[&body[..], b" "].concat()));
    assert!(forged.verify_slice(&hex::decode(v1).expect("hex")).is_err());

    // The agent's note is stored with the parked call, and the notification carries none
    // of it.
    let stored = rig
        .executor
        .approval_store()
        .expect("store")
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.note.as_deref(), Some(NOTE));
    assert!(
        !String::from_utf8_lossy(&body).contains("note-canary-5e1d"),
        "the agent's note is in the notification: {}",
        String::from_utf8_lossy(&body)
    );

    let message: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(message["type"], "approval.parked");
    assert_eq!(message["approval_id"], id.as_str());
    assert_eq!(message["action"], "create_deployment");
    assert_eq!(message["effect"], "external_commitment");
    assert_eq!(message["decide_url"], rig.decide_url);
    assert!(
        message["request"].as_str().is_some_and(
            |r| r.starts_with("POST ") && r.contains("/v1/projects/proj_42/deployments")
        ),
        "{message}"
    );
    let text = String::from_utf8_lossy(&body);
    assert!(
        !text.contains(UPSTREAM_TOKEN) && !text.contains(SECRET),
        "{text}"
    );
    assert_eq!(rig.upstream.requests(), 0, "parked: nothing sent yet");

    // The bot decides through the link, signed with the secret it shares.
    let decision = serde_json::to_vec(&json!({
        "approval_id": message["approval_id"],
        "decision": "approve",
        "decided_by": "alice@example.com",
    }))
    .expect("json");
    let now = sallyport_core::clock::now_ms() / 1000;
    let client = HttpChannel::builder()
        .build()
        .and_then(|c| c.client(Duration::from_secs(5)))
        .expect("client");
    let answer = client
        .post(message["decide_url"].as_str().expect("link"))
        .header("content-type", "application/json")
        .header(
            "sallyport-signature",
            sign(SECRET.as_bytes(), now, &decision),
        )
        .body(decision)
        .send()
        .await
        .expect("decide");
    assert_eq!(answer.status().as_u16(), 200, "{:?}", answer.text().await);
    assert_eq!(rig.state(&id).await, ApprovalState::Finished);
    assert_eq!(rig.upstream.requests(), 1, "sent once, after the decision");
    assert_eq!(inbox.all().len(), 1, "one notification per parked call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ed25519_signed_notification_verifies_with_the_public_key_alone() {
    let inbox = Inbox::default();
    let url = bot(inbox.clone(), StatusCode::OK).await;
    let key = SigningKey::from_bytes(&[7; 32]);
    let public = key.verifying_key();
    let rig = rig(|decide| {
        Notifier::builder(url, decide)
            .ed25519(key)
            .build()
            .expect("notifier")
    })
    .await;
    let (id, _) = rig.park("build_8").await;
    let (_, body, header) = first_message(&inbox).await;
    let (t, signature) = parts(&header, "ed25519");
    let bytes: [u8; 64] = base64::engine::general_purpose::STANDARD
        .decode(signature)
        .expect("base64")
        .try_into()
        .expect("64 bytes");
    let signature = Signature::from_bytes(&bytes);
    public
        .verify(&signed(&t, &body), &signature)
        .expect("verifies with the public key");
    assert!(public.verify(&signed(&t, b"{}"), &signature).is_err());
    let message: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(message["approval_id"], id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_that_is_down_gets_every_try_and_the_notification_is_a_dead_letter() {
    let inbox = Inbox::default();
    let url = bot(inbox.clone(), StatusCode::SERVICE_UNAVAILABLE).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dead = dir.path().join("dead-letters.jsonl");
    let file = dead.clone();
    let down = rig(move |decide| {
        Notifier::builder(url, decide)
            .hmac(Secret::new(SECRET))
            .attempts(3)
            .backoff(Duration::from_millis(20))
            .dead_letters(file)
            .build()
            .expect("notifier")
    })
    .await;
    let (id, _) = down.park("build_9").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let letters = loop {
        let letters = DeadLetter::read_all(&dead).expect("read");
        if !letters.is_empty() {
            break letters;
        }
        assert!(Instant::now() < deadline, "no dead letter within 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].approval_id, id.as_str());
    assert_eq!(letters[0].action, "create_deployment");
    assert_eq!(letters[0].attempts, 3);
    assert_eq!(letters[0].last_error, "HTTP 503");
    let tries = inbox.all();
    assert_eq!(tries.len(), 3, "every try reached the bot");
    // Backoff: the second try waited at least 20 ms, the third 40 ms.
    assert!(tries[1].0.duration_since(tries[0].0) >= Duration::from_millis(20));
    assert!(tries[2].0.duration_since(tries[1].0) >= Duration::from_millis(40));
    // The call is still parked: a notification is never the decision.
    assert_eq!(down.state(&id).await, ApprovalState::Awaiting);
    let file = std::fs::read_to_string(&dead).expect("file");
    assert!(!file.contains(SECRET) && !file.contains("v1="), "{file}");

    // A bot that is not there at all: a refused connection is a try too.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}/notify", listener.local_addr().expect("addr"))
    };
    let dead2 = dir.path().join("dead-2.jsonl");
    let file2 = dead2.clone();
    let unreachable = rig(move |decide| {
        Notifier::builder(closed, decide)
            .hmac(Secret::new(SECRET))
            .attempts(2)
            .backoff(Duration::from_millis(10))
            .dead_letters(file2)
            .build()
            .expect("notifier")
    })
    .await;
    unreachable.park("build_10").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let letters = DeadLetter::read_all(&dead2).expect("read");
        if let Some(letter) = letters.first() {
            assert_eq!(letter.attempts, 2);
            assert_eq!(letter.last_error, "could not connect");
            break;
        }
        assert!(Instant::now() < deadline, "no dead letter within 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn a_notifier_needs_a_key_a_long_secret_and_an_http_url() {
    let err = Notifier::builder("http://127.0.0.1:1/n", "x")
        .build()
        .expect_err("no key");
    assert_eq!(
        err.to_string(),
        "a notifier signs every message: set an HMAC secret or an Ed25519 key"
    );
    let err = Notifier::builder("http://127.0.0.1:1/n", "x")
        .hmac(Secret::new("short"))
        .build()
        .expect_err("short");
    assert_eq!(err.to_string(), "the HMAC secret is shorter than 16 bytes");
    let err = Notifier::builder("ftp://example.com/n", "x")
        .hmac(Secret::new(SECRET))
        .build()
        .expect_err("url");
    assert_eq!(
        err.to_string(),
        "the notification URL must be an http:// or https:// URL"
    );
}
