//! The webhook receiver served on 127.0.0.1:0 with `axum::serve`, driven by a real HTTP
//! client, deciding approvals in a real SQLite journal file with the shared secret in a real
//! vault. Every refusal is checked to leave the stored approval and the journal's record
//! count exactly as they were.

use std::sync::Arc;
use std::time::Duration;

use sallyport_core::approval::{Approval, ApprovalId, ApprovalState, Verdict};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Reply, Upstream};
use sallyport_webhook::{SIGNATURE_HEADER, WebhookReceiver, sign};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const CREDENTIAL: &str = "approvals-webhook";
const SECRET: &str = "whsec-7Qm2-shared-with-the-bot";
const WRONG_SECRET: &str = "whsec-not-the-one-in-the-vault";

/// Queue one build for the preview environment.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_deployment", effect = external_commitment, retry = idempotency_key)]
#[http(post = "/v1/projects/{project_id}/deployments", status(202) = pending, result = Resource)]
struct CreateDeployment {
    #[scope(project)]
    project_id: String,
    build_id: String,
    /// Why.
    #[audit_note]
    reason: Option<String>,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Resource {
    id: String,
    state: String,
}

struct Rig {
    upstream: Upstream,
    executor: Executor,
    vault: Arc<MemoryVault>,
    url: String,
    client: reqwest::Client,
    journal: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// What a delivery got back.
struct Answer {
    status: u16,
    cache_control: Option<String>,
    text: String,
    json: Value,
}

async fn rig() -> Rig {
    rig_with(sallyport_core::approval::DEFAULT_EXPIRY).await
}

fn catalog() -> Catalog {
    Catalog::builder()
        .action::<CreateDeployment>()
        .build()
        .expect("catalog")
}

async fn rig_with(expiry: Duration) -> Rig {
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
    let channel = HttpChannel::builder()
        .base_url(upstream.url())
        .build()
        .expect("channel");
    let client = channel.client(Duration::from_secs(5)).expect("client");
    let executor = Executor::builder(catalog())
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .vault_arc(vault.clone())
        .channel(channel)
        .consent_mode(sallyport_core::approval::ConsentMode::Deferred)
        .approval_expiry(expiry)
        .build()
        .expect("executor");
    let receiver = WebhookReceiver::builder(executor.clone())
        .secret_credential(CREDENTIAL)
        .build()
        .expect("receiver");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = receiver.router();
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    Rig {
        upstream,
        executor,
        vault,
        url: format!("http://{addr}{}", sallyport_webhook::DEFAULT_PATH),
        client,
        journal: dir.path().join("journal.db"),
        _dir: dir,
    }
}

fn now() -> u64 {
    sallyport_core::clock::now_ms() / 1000
}

fn body(id: &str, decision: &str, by: &str, reason: Option<&str>) -> Vec<u8> {
    let mut v = json!({"approval_id": id, "decision": decision, "decided_by": by});
    if let Some(r) = reason {
        v["reason"] = json!(r);
    }
    serde_json::to_vec(&v).expect("json")
}

impl Rig {
    /// Posts `body` with `signature` as the `Sallyport-Signature` header (none if `None`).
    async fn post(&self, body: Vec<u8>, signature: Option<String>) -> Answer {
        let mut request = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body);
        if let Some(s) = signature {
            request = request.header(SIGNATURE_HEADER, s);
        }
        let response = request.send().await.expect("send");
        let status = response.status().as_u16();
        let cache_control = response
            .headers()
            .get("cache-control")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response.text().await.expect("text");
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            cache_control,
            text,
            json,
        }
    }

    /// Posts `body` signed now with the vault's secret.
    async fn deliver(&self, body: Vec<u8>) -> Answer {
        let signature = sign(SECRET.as_bytes(), now(), &body);
        self.post(body, Some(signature)).await
    }

    /// Parks a real deferred call: the executor stores its approval in the journal and
    /// answers `pending` / `awaiting_approval` without sending anything.
    async fn park(&self) -> ApprovalId {
        self.park_build(7).await
    }

    /// [`Rig::park`] for build `n` (distinct builds are distinct calls, each parked anew).
    async fn park_build(&self, n: usize) -> ApprovalId {
        let requests = self.upstream.requests();
        let session = Session::new("chat-1").allow("project", ["proj_42"]);
        let result = self
            .executor
            .call(
                "create_deployment",
                json!({"project_id": "proj_42", "build_id": format!("build_{n}"), "reason": "ship the fix"}),
                &session,
            )
            .await;
        let json: Value = serde_json::from_str(&result.to_json()).expect("result json");
        assert_eq!(json["status"], "pending", "{json}");
        assert_eq!(json["code"], "awaiting_approval", "{json}");
        assert_eq!(self.upstream.requests(), requests);
        let id = result.approval_id.expect("an approval id");
        assert_eq!(self.approval(&id).await.state, ApprovalState::Awaiting);
        id
    }

    /// Another executor over the same journal file (its own SQLite connection), as a
    /// second process deciding through the CLI or a provider would be.
    fn other_executor(&self) -> Executor {
        let channel = HttpChannel::builder()
            .base_url(self.upstream.url())
            .build()
            .expect("channel");
        Executor::builder(catalog())
            .journal(SqliteJournal::open(&self.journal).expect("journal"))
            .channel(channel)
            .consent_mode(sallyport_core::approval::ConsentMode::Deferred)
            .build()
            .expect("executor")
    }

    /// The records of decisions (approved or denied) on `id`.
    async fn decision_records(&self, id: &ApprovalId) -> Vec<Value> {
        self.executor
            .journal()
            .records()
            .await
            .expect("records")
            .into_iter()
            .filter_map(|r| r.event.approval.map(|note| (note, r.event.reason)))
            .map(|(note, reason)| {
                let mut v = serde_json::to_value(note).expect("note");
                v["reason"] = json!(reason);
                v
            })
            .filter(|v| {
                v["approval_id"] == id.as_str()
                    && (v["step"] == "approved" || v["step"] == "denied")
            })
            .collect()
    }

    async fn approval(&self, id: &ApprovalId) -> Approval {
        self.executor
            .approval_store()
            .expect("an approval store")
            .approval(id)
            .await
            .expect("read")
            .expect("stored")
    }

    async fn record_count(&self) -> usize {
        self.executor
            .journal()
            .records()
            .await
            .expect("records")
            .len()
    }

    async fn snapshot(&self, id: &ApprovalId) -> (Approval, usize) {
        (self.approval(id).await, self.record_count().await)
    }

    /// `answer` is the refusal `status`/`code`, and nothing stored changed.
    async fn assert_refused(
        &self,
        answer: &Answer,
        status: u16,
        code: &str,
        id: &ApprovalId,
        before: &(Approval, usize),
    ) {
        assert_eq!(answer.status, status, "{}", answer.text);
        assert_eq!(answer.json["error"], code, "{}", answer.text);
        assert!(
            answer.json["reason"]
                .as_str()
                .is_some_and(|r| !r.is_empty()),
            "{}",
            answer.text
        );
        assert_eq!(
            answer.json.as_object().map(|o| o.len()),
            Some(2),
            "{}",
            answer.text
        );
        assert_eq!(answer.cache_control.as_deref(), Some("no-store"));
        assert_no_secret(&answer.text);
        assert_eq!(
            &self.snapshot(id).await,
            before,
            "a refusal changed the store"
        );
        assert_eq!(self.upstream.requests(), 0);
    }
}

fn assert_no_secret(text: &str) {
    for secret in [SECRET, WRONG_SECRET] {
        assert!(!text.contains(secret), "secret in {text}");
        assert!(!text.contains(&hex(secret)), "secret (hex) in {text}");
    }
    // No signature (64 hex digits) comes back, whoever made it.
    let longest_hex_run = text
        .split(|c: char| !c.is_ascii_hexdigit())
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(longest_hex_run < 64, "a signature echoed in {text}");
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The `v1` hex of a header value.
fn v1_of(header: &str) -> &str {
    header.split_once(",v1=").expect("v1").1
}

#[tokio::test]
async fn a_signed_approval_is_recorded_with_the_decider_and_the_call_is_sent_once() {
    let rig = rig().await;
    let id = rig.park().await;
    let answer = rig
        .deliver(body(id.as_str(), "approve", "alice@example.com", None))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(
        answer.json,
        json!({"approval_id": id.as_str(), "state": "finished", "recorded": true})
    );
    assert_eq!(answer.cache_control.as_deref(), Some("no-store"));
    assert_no_secret(&answer.text);
    assert_eq!(rig.upstream.requests(), 1);

    let stored = rig.approval(&id).await;
    assert_eq!(stored.state, ApprovalState::Finished);
    let decision = stored.decision.clone().expect("decision");
    assert_eq!(decision.verdict, Verdict::Approve);
    assert_eq!(decision.decider.by, "alice@example.com");
    assert_eq!(decision.decider.channel, "webhook");
    assert_eq!(decision.reason, None);
    let result = serde_json::to_value(stored.result.expect("result")).expect("json");
    assert_eq!(result["status"], "pending", "{result}");
    assert_eq!(result["data"]["id"], "dep_2388", "{result}");

    let decisions = rig.decision_records(&id).await;
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["step"], "approved");
    assert_eq!(decisions[0]["by"], "alice@example.com");
    assert_eq!(decisions[0]["channel"], "webhook");
    assert!(
        rig.executor
            .journal()
            .verify()
            .await
            .expect("verify")
            .is_intact()
    );
}

#[tokio::test]
async fn a_signed_denial_records_the_reason_sends_nothing_and_a_later_approval_is_not_recorded() {
    let rig = rig().await;
    let id = rig.park().await;
    let answer = rig
        .deliver(body(
            id.as_str(),
            "deny",
            "bob",
            Some("not during the freeze"),
        ))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(
        answer.json,
        json!({"approval_id": id.as_str(), "state": "denied", "recorded": true})
    );
    let stored = rig.approval(&id).await;
    assert_eq!(stored.state, ApprovalState::Denied);
    let decision = stored.decision.clone().expect("decision");
    assert_eq!(decision.verdict, Verdict::Deny);
    assert_eq!(decision.decider.by, "bob");
    assert_eq!(decision.decider.channel, "webhook");
    assert_eq!(decision.reason.as_deref(), Some("not during the freeze"));
    let decisions = rig.decision_records(&id).await;
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["step"], "denied");
    assert_eq!(decisions[0]["reason"], "not during the freeze");
    assert_eq!(rig.upstream.requests(), 0);

    // Someone else approves afterwards: answered, not recorded, nothing changes.
    let before = rig.snapshot(&id).await;
    let late = rig
        .deliver(body(id.as_str(), "approve", "carol", None))
        .await;
    assert_eq!(late.status, 200, "{}", late.text);
    assert_eq!(
        late.json,
        json!({"approval_id": id.as_str(), "state": "denied", "recorded": false})
    );
    assert_eq!(rig.snapshot(&id).await, before);
    assert_eq!(rig.upstream.requests(), 0);
}

#[tokio::test]
async fn a_bad_signature_or_the_wrong_secret_is_refused_and_changes_nothing() {
    let rig = rig().await;
    let id = rig.park().await;
    let before = rig.snapshot(&id).await;
    let payload = body(id.as_str(), "approve", "mallory", None);

    let forged = format!("t={},v1={}", now(), "0f".repeat(32));
    let answer = rig.post(payload.clone(), Some(forged)).await;
    rig.assert_refused(&answer, 401, "bad_signature", &id, &before)
        .await;

    let wrong = sign(WRONG_SECRET.as_bytes(), now(), &payload);
    let answer = rig.post(payload.clone(), Some(wrong.clone())).await;
    rig.assert_refused(&answer, 401, "bad_signature", &id, &before)
        .await;
    assert!(!answer.text.contains(v1_of(&wrong)));

    // A signature made for another timestamp, moved to this one.
    let t = now();
    let other = sign(SECRET.as_bytes(), t - 1, &payload);
    let moved = format!("t={t},v1={}", v1_of(&other));
    let answer = rig.post(payload, Some(moved)).await;
    rig.assert_refused(&answer, 401, "bad_signature", &id, &before)
        .await;
}

#[tokio::test]
async fn stale_and_future_timestamps_are_refused_before_the_signature_is_checked() {
    let rig = rig().await;
    let id = rig.park().await;
    let before = rig.snapshot(&id).await;
    let payload = body(id.as_str(), "approve", "alice", None);
    for t in [now() - 301, now() + 301, 0, u64::MAX / 2] {
        let signed = sign(SECRET.as_bytes(), t, &payload);
        let answer = rig.post(payload.clone(), Some(signed)).await;
        rig.assert_refused(&answer, 401, "stale_timestamp", &id, &before)
            .await;
    }
    // Inside the window either way is accepted (a sender's clock a little off).
    let signed = sign(SECRET.as_bytes(), now() + 200, &payload);
    let answer = rig.post(payload, Some(signed)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["recorded"], true);
}

#[tokio::test]
async fn a_replayed_delivery_is_refused_even_after_it_was_decided() {
    let rig = rig().await;
    let id = rig.park().await;
    let payload = body(id.as_str(), "deny", "bob", Some("no"));
    let signed = sign(SECRET.as_bytes(), now(), &payload);
    let first = rig.post(payload.clone(), Some(signed.clone())).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.json["recorded"], true);

    let after = rig.snapshot(&id).await;
    let again = rig.post(payload, Some(signed)).await;
    rig.assert_refused(&again, 409, "replayed", &id, &after)
        .await;
}

#[tokio::test]
async fn a_body_changed_after_signing_fails_the_signature() {
    let rig = rig().await;
    let id = rig.park().await;
    let before = rig.snapshot(&id).await;
    let signed_body = body(id.as_str(), "deny", "bob", Some("too risky"));
    let signature = sign(SECRET.as_bytes(), now(), &signed_body);

    // The decision flipped.
    let flipped = body(id.as_str(), "approve", "bob", Some("too risky"));
    let answer = rig.post(flipped, Some(signature.clone())).await;
    rig.assert_refused(&answer, 401, "bad_signature", &id, &before)
        .await;

    // The same JSON value, re-serialized with other whitespace: the bytes are what is signed.
    let value: Value = serde_json::from_slice(&signed_body).expect("json");
    let pretty = serde_json::to_vec_pretty(&value).expect("pretty");
    assert_ne!(pretty, signed_body);
    let answer = rig.post(pretty, Some(signature.clone())).await;
    rig.assert_refused(&answer, 401, "bad_signature", &id, &before)
        .await;

    // The untouched body with that signature still goes through: the refusals above were
    // the alterations, not the signature.
    let answer = rig.post(signed_body, Some(signature)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["state"], "denied");
}

#[tokio::test]
async fn an_unknown_approval_is_404_and_appends_nothing() {
    let rig = rig().await;
    let id = rig.park().await;
    let before = rig.snapshot(&id).await;
    for unknown in [
        ApprovalId::generate().as_str().to_owned(),
        "apr_ with space".to_owned(),
        "x".repeat(129),
    ] {
        let answer = rig.deliver(body(&unknown, "approve", "alice", None)).await;
        rig.assert_refused(&answer, 404, "unknown_approval", &id, &before)
            .await;
        assert!(!answer.text.contains(&unknown), "{}", answer.text);
    }
}

#[tokio::test]
async fn a_locked_vault_or_a_missing_secret_is_503_and_the_same_delivery_works_later() {
    let rig = rig().await;
    let id = rig.park().await;
    let before = rig.snapshot(&id).await;
    let payload = body(id.as_str(), "approve", "alice", None);
    let signed = sign(SECRET.as_bytes(), now(), &payload);

    rig.vault.lock();
    let answer = rig.post(payload.clone(), Some(signed.clone())).await;
    rig.assert_refused(&answer, 503, "vault_locked", &id, &before)
        .await;
    rig.vault.unlock();

    assert!(rig.vault.remove(CREDENTIAL));
    let answer = rig.post(payload.clone(), Some(signed.clone())).await;
    rig.assert_refused(&answer, 503, "secret_unavailable", &id, &before)
        .await;
    assert!(!answer.text.contains(CREDENTIAL), "{}", answer.text);

    // Too short to authenticate anything.
    rig.vault.set(
        CredentialMeta::new(
            CREDENTIAL,
            CredentialKind::Bearer,
            Binding::url("https://chatops.example.com"),
        ),
        Secret::new("short"),
    );
    let short = sign(b"short", now(), &payload);
    let answer = rig.post(payload.clone(), Some(short)).await;
    rig.assert_refused(&answer, 503, "secret_unavailable", &id, &before)
        .await;

    // Back in the vault: the very delivery refused above is heard now.
    rig.vault.set(
        CredentialMeta::new(
            CREDENTIAL,
            CredentialKind::Bearer,
            Binding::url("https://chatops.example.com"),
        ),
        Secret::new(SECRET),
    );
    let answer = rig.post(payload, Some(signed)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["recorded"], true);
}

#[tokio::test]
async fn a_rotated_secret_applies_to_the_next_delivery() {
    let rig = rig().await;
    let id = rig.park().await;
    let before = rig.snapshot(&id).await;
    let rotated = "whsec-rotated-9d8c7b6a5f4e";
    rig.vault.set(
        CredentialMeta::new(
            CREDENTIAL,
            CredentialKind::Bearer,
            Binding::url("https://chatops.example.com"),
        ),
        Secret::new(rotated),
    );
    let payload = body(id.as_str(), "approve", "alice", None);
    let old = sign(SECRET.as_bytes(), now(), &payload);
    let answer = rig.post(payload.clone(), Some(old)).await;
    rig.assert_refused(&answer, 401, "bad_signature", &id, &before)
        .await;
    let new = sign(rotated.as_bytes(), now(), &payload);
    let answer = rig.post(payload, Some(new)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert!(!answer.text.contains(rotated));
    assert_eq!(answer.json["recorded"], true);
}

#[tokio::test]
async fn missing_and_malformed_headers_and_bodies_are_400_and_oversized_bodies_413() {
    let rig = rig().await;
    let id = rig.park().await;
    let before = rig.snapshot(&id).await;
    let payload = body(id.as_str(), "approve", "alice", None);

    let answer = rig.post(payload.clone(), None).await;
    rig.assert_refused(&answer, 400, "missing_signature", &id, &before)
        .await;
    let t = now();
    let good = sign(SECRET.as_bytes(), t, &payload);
    for malformed in [
        format!("v1={}", v1_of(&good)),
        format!("t={t}"),
        format!("t={t},v1={}", &v1_of(&good)[..63]),
        format!("t={t};v1={}", v1_of(&good)),
        "garbage".to_owned(),
    ] {
        let answer = rig.post(payload.clone(), Some(malformed)).await;
        rig.assert_refused(&answer, 400, "malformed_signature", &id, &before)
            .await;
    }

    // Signed, but not a decision.
    for bad_body in [
        b"not json".to_vec(),
        b"[]".to_vec(),
        body(id.as_str(), "maybe", "alice", None),
        body(id.as_str(), "approve", "", None),
        body(id.as_str(), "approve", "\u{1b}\u{7}", None),
        serde_json::to_vec(&json!({"approval_id": id.as_str(), "decision": "approve"}))
            .expect("json"),
        serde_json::to_vec(&json!({
            "approval_id": id.as_str(), "decision": "approve", "decided_by": "a", "extra": 1
        }))
        .expect("json"),
    ] {
        let answer = rig.deliver(bad_body).await;
        rig.assert_refused(&answer, 400, "invalid_body", &id, &before)
            .await;
    }

    let huge = vec![b' '; sallyport_webhook::DEFAULT_MAX_BODY_BYTES + 1];
    let answer = rig.deliver(huge).await;
    rig.assert_refused(&answer, 413, "body_too_large", &id, &before)
        .await;

    // Only POST is routed; the answer is still not cacheable.
    let get = rig.client.get(&rig.url).send().await.expect("get");
    assert_eq!(get.status().as_u16(), 405);
    assert_eq!(
        get.headers()
            .get("cache-control")
            .and_then(|v| v.to_str().ok()),
        Some("no-store")
    );
    assert_eq!(rig.snapshot(&id).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_approvals_and_denials_for_one_approval_record_exactly_one() {
    let rig = Arc::new(rig().await);
    let id = rig.park().await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let rig = Arc::clone(&rig);
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            let decision = if i % 2 == 0 { "approve" } else { "deny" };
            rig.deliver(body(id.as_str(), decision, &format!("bot-{i}"), None))
                .await
        }));
    }
    let mut recorded = Vec::new();
    for task in tasks {
        let answer = task.await.expect("join");
        assert_eq!(answer.status, 200, "{}", answer.text);
        if answer.json["recorded"] == true {
            recorded.push(answer.json["state"].clone());
        } else {
            assert_eq!(answer.json["recorded"], false, "{}", answer.text);
        }
    }
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let stored = rig.approval(&id).await;
    assert_eq!(Value::from(stored.state.as_str()), recorded[0]);
    assert_eq!(rig.decision_records(&id).await.len(), 1);
    let winner = stored.decision.expect("decision");
    match winner.verdict {
        Verdict::Approve => {
            assert_eq!(stored.state, ApprovalState::Finished);
            assert_eq!(rig.upstream.requests(), 1);
        }
        Verdict::Deny => {
            assert_eq!(stored.state, ApprovalState::Denied);
            assert_eq!(rig.upstream.requests(), 0);
        }
    }
}

#[tokio::test]
async fn a_second_approval_after_the_call_ran_is_answered_and_sends_nothing() {
    let rig = rig().await;
    let id = rig.park().await;
    let answer = rig
        .deliver(body(id.as_str(), "approve", "alice", None))
        .await;
    assert_eq!(answer.json["recorded"], true, "{}", answer.text);
    assert_eq!(rig.upstream.requests(), 1);
    let before = rig.snapshot(&id).await;
    let again = rig.deliver(body(id.as_str(), "approve", "bob", None)).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(
        again.json,
        json!({"approval_id": id.as_str(), "state": "finished", "recorded": false})
    );
    assert_eq!(rig.snapshot(&id).await, before);
    assert_eq!(rig.upstream.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_approvals_of_a_deferred_call_send_one_request() {
    let rig = Arc::new(rig().await);
    let id = rig.park().await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let rig = Arc::clone(&rig);
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            rig.deliver(body(id.as_str(), "approve", &format!("bot-{i}"), None))
                .await
        }));
    }
    let mut recorded = 0;
    for task in tasks {
        let answer = task.await.expect("join");
        assert_eq!(answer.status, 200, "{}", answer.text);
        if answer.json["recorded"] == true {
            recorded += 1;
            assert_eq!(answer.json["state"], "finished", "{}", answer.text);
        }
    }
    assert_eq!(recorded, 1);
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(rig.approval(&id).await.state, ApprovalState::Finished);
}

#[tokio::test]
async fn a_delivery_after_the_expiry_records_the_expiry_not_the_decision_and_sends_nothing() {
    let rig = rig_with(Duration::from_millis(200)).await;
    let id = rig.park().await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let answer = rig
        .deliver(body(id.as_str(), "approve", "alice", None))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(
        answer.json,
        json!({"approval_id": id.as_str(), "state": "expired", "recorded": false})
    );
    let stored = rig.approval(&id).await;
    assert_eq!(stored.state, ApprovalState::Expired);
    assert_eq!(stored.decision, None);
    assert!(rig.decision_records(&id).await.is_empty());
    assert_eq!(rig.upstream.requests(), 0);
}

#[tokio::test]
async fn the_builder_refuses_what_cannot_work() {
    use sallyport_webhook::BuildError;
    let dir = tempfile::tempdir().expect("tempdir");
    let upstream = Upstream::start(|_| Reply::Json(202, json!({}))).await;
    let executor = |vault: bool| {
        let channel = HttpChannel::builder()
            .base_url(upstream.url())
            .build()
            .expect("channel");
        let builder = Executor::builder(catalog())
            .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
            .channel(channel);
        let builder = if vault {
            builder.vault(MemoryVault::new())
        } else {
            builder
        };
        builder.build().expect("executor")
    };
    let refused = |b: sallyport_webhook::WebhookReceiverBuilder| b.build().expect_err("refused");

    assert!(matches!(
        refused(WebhookReceiver::builder(executor(true))),
        BuildError::MissingSecretCredential
    ));
    assert!(matches!(
        refused(WebhookReceiver::builder(executor(false)).secret_credential(CREDENTIAL)),
        BuildError::MissingVault
    ));
    assert!(matches!(
        refused(WebhookReceiver::builder(executor(true)).secret_credential("_reserved")),
        BuildError::InvalidSecretCredential(_)
    ));
    for path in ["approvals", "/approvals/{id}", "/"] {
        assert!(matches!(
            refused(
                WebhookReceiver::builder(executor(true))
                    .secret_credential(CREDENTIAL)
                    .path(path)
            ),
            BuildError::InvalidPath
        ));
    }
    assert!(matches!(
        refused(
            WebhookReceiver::builder(executor(true))
                .secret_credential(CREDENTIAL)
                .replay_window(Duration::from_millis(500))
        ),
        BuildError::InvalidReplayWindow
    ));
    assert!(matches!(
        refused(
            WebhookReceiver::builder(executor(true))
                .secret_credential(CREDENTIAL)
                .max_body_bytes(0)
        ),
        BuildError::InvalidMaxBodyBytes
    ));
    let receiver = WebhookReceiver::builder(executor(true))
        .secret_credential(CREDENTIAL)
        .path("/hooks/sallyport")
        .build()
        .expect("receiver");
    assert_eq!(receiver.path(), "/hooks/sallyport");
    let shown = format!("{receiver:?}");
    assert!(
        shown.contains(CREDENTIAL) && !shown.contains(SECRET),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_webhook_and_two_other_executors_on_one_journal_file_send_one_request_a_round() {
    const ROUNDS: usize = 100;
    let rig = Arc::new(rig().await);
    let others = [rig.other_executor(), rig.other_executor()];
    for round in 0..ROUNDS {
        let id = rig.park_build(round).await;
        let webhook = {
            let rig = Arc::clone(&rig);
            let id = id.clone();
            tokio::spawn(async move {
                let answer = rig
                    .deliver(body(id.as_str(), "approve", "chat-bot", None))
                    .await;
                assert_eq!(answer.status, 200, "{}", answer.text);
                answer.json["recorded"] == true
            })
        };
        let deciders: Vec<_> = others
            .iter()
            .enumerate()
            .map(|(n, executor)| {
                let executor = executor.clone();
                let id = id.clone();
                tokio::spawn(async move {
                    let decider = sallyport_core::approval::Decider::new(format!("cli-{n}"), "cli");
                    let decided = executor
                        .decide(&id, Verdict::Approve, &decider, None)
                        .await
                        .expect("decide");
                    matches!(decided, sallyport_core::approval::Decided::Recorded(_))
                })
            })
            .collect();
        let mut recorded = usize::from(webhook.await.expect("join"));
        for decider in deciders {
            recorded += usize::from(decider.await.expect("join"));
        }
        assert_eq!(recorded, 1, "round {round}: one decision recorded");
        assert_eq!(rig.decision_records(&id).await.len(), 1, "round {round}");
        // Whoever recorded it carried it out, before answering.
        assert_eq!(
            rig.approval(&id).await.state,
            ApprovalState::Finished,
            "round {round}"
        );
        assert_eq!(
            rig.upstream.requests(),
            (round + 1) as u64,
            "round {round}: one request"
        );
    }
    let report = rig.executor.journal().verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
}
