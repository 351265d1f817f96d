//! The vault changes while a call is in flight (issue 12, items 1, 3 and 4): locked inside the
//! consent callback, locked everywhere (the lock marker) or the credential rotated during a
//! `Retry-After` wait, locked while the upstream answers with an echo of the credential; a
//! value echoed after its rotation; a cancelled call's record; secrets cut by the request
//! summary and the upstream message limits. Against the real HTTP upstream on loopback (its
//! request counter), real vaults (`MemoryVault`, `FileVault` with its lock marker) and a real
//! SQLite journal.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sallyport_core::code::{RefusalCode, UpstreamCode};
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::{Journal, SqliteJournal};
use sallyport_core::outcome::ActionResult;
use sallyport_core::target::Target;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, FileVault, MemoryVault, Secret, Vault, VaultAdmin,
};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Received, Reply, Upstream, audit_event, journal_text};
use sallyport_tests::vault_rig::{PASSPHRASE, fast_kdf};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A token with every character an URL encoder treats differently.
const TOKEN: &str = "sk-live/Ab+12=x.y_z~Q";
/// The value it is rotated to.
const ROTATED: &str = "sk-live/Zz+98=r.o_t~N";

/// Read one deployment.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_deployment", effect = observe)]
#[http(get = "/v1/deployments/{deployment_id}", result = Resource)]
struct GetDeployment {
    deployment_id: String,
}

/// Queue one build for the preview environment.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_deployment", effect = external_commitment, retry = idempotency_key,
         reconcile = "get_deployment", credential = "deploy-api")]
#[http(post = "/v1/projects/{project_id}/deployments", result = Resource)]
struct CreateDeployment {
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

fn catalog() -> Catalog {
    Catalog::builder()
        .action::<GetDeployment>()
        .action_with_spec::<CreateDeployment>(|mut spec| {
            if let Target::Http(t) = &mut spec.target {
                t.message_field = Some("/message".into());
            }
            spec
        })
        .build()
        .expect("catalog")
}

fn meta(url: &str) -> CredentialMeta {
    CredentialMeta::new("deploy-api", CredentialKind::Bearer, Binding::url(url))
}

/// The bearer token the upstream received (what it would echo).
fn token_seen(r: &Received) -> String {
    r.header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_owned()
}

type Asked = Arc<Mutex<Vec<String>>>;

struct Rig {
    upstream: Upstream,
    executor: Executor,
    journal: PathBuf,
    /// Every consent prompt, as rendered for the human.
    asked: Asked,
    _dir: tempfile::TempDir,
}

/// An executor over `vault` and a fresh upstream; `consent` runs inside the consent callback
/// before it answers `decision`.
async fn rig(
    vault: Arc<dyn Vault>,
    upstream: Upstream,
    dir: tempfile::TempDir,
    consent: impl Fn() + Send + Sync + 'static,
    decision: ConsentDecision,
) -> Rig {
    let journal = dir.path().join("journal.db");
    let asked: Asked = Arc::default();
    let seen = Arc::clone(&asked);
    let channel = HttpChannel::builder()
        .base_url(upstream.url())
        .build()
        .expect("channel");
    let executor = Executor::builder(catalog())
        .journal(SqliteJournal::open(&journal).expect("journal"))
        .vault_arc(vault)
        .consent(FnConsent::new(move |request| {
            seen.lock().unwrap().push(request.render());
            consent();
            let decision = decision.clone();
            async move { decision }
        }))
        .channel(channel)
        .build()
        .expect("executor");
    Rig {
        upstream,
        executor,
        journal,
        asked,
        _dir: dir,
    }
}

/// An approving rig over a fresh memory vault that is also put in `slot`, so the upstream's
/// behaviour can reach the vault in the middle of the call.
async fn rig_sharing_vault(upstream: Upstream, slot: &Mutex<Option<Arc<MemoryVault>>>) -> Rig {
    let memory = memory_vault(&upstream.url());
    *slot.lock().unwrap() = Some(Arc::clone(&memory));
    rig(
        memory,
        upstream,
        tempfile::tempdir().unwrap(),
        || {},
        ConsentDecision::Approve,
    )
    .await
}

fn memory_vault(url: &str) -> Arc<MemoryVault> {
    let vault = Arc::new(MemoryVault::new());
    vault.set(meta(url), Secret::new(TOKEN));
    vault
}

fn create(reason: &str) -> Value {
    json!({"project_id": "proj_1", "build_id": "build_7", "reason": reason})
}

impl Rig {
    async fn call(&self, args: Value) -> ActionResult {
        let session = Session::new("s1");
        self.executor
            .call("create_deployment", args, &session)
            .await
    }

    fn audit(&self, r: &ActionResult) -> Value {
        audit_event(&self.journal, r.attempt_id.as_str())
    }
}

/// No 8-byte piece of `secret` (raw) anywhere in `text`.
fn assert_no_piece(what: &str, text: &str, secret: &str) {
    for start in 0..=secret.len() - 8 {
        let piece = &secret[start..start + 8];
        assert!(
            !text.contains(piece),
            "{what} carries {piece:?} of a secret:\n{text}"
        );
    }
}

fn assert_journal_clean(path: &Path, secret: &str) {
    assert_no_piece("the journal", &journal_text(path), secret);
    for suffix in ["", "-wal"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let bytes = std::fs::read(&file).unwrap_or_default();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the journal file{suffix} holds the raw secret"
        );
    }
}

fn ok_resource() -> Reply {
    Reply::Json(201, json!({"id": "dep_1", "state": "queued"}))
}

// ---------------------------------------------------------------- item 1: nothing is sent

#[tokio::test]
async fn a_vault_locked_inside_the_consent_callback_sends_nothing() {
    let upstream = Upstream::start(|_| ok_resource()).await;
    let vault = memory_vault(&upstream.url());
    let lock = Arc::clone(&vault);
    let rig = rig(
        vault,
        upstream,
        tempfile::tempdir().unwrap(),
        move || lock.lock(),
        ConsentDecision::Approve,
    )
    .await;
    let r = rig.call(create("ship the fix")).await;
    assert_eq!(r.status, Status::Rejected, "{}", r.to_json());
    assert_eq!(r.code, Some(RefusalCode::VaultLocked.into()));
    assert_eq!(
        r.reason.as_deref(),
        Some("the credential vault was locked during the call; nothing was sent")
    );
    assert_eq!(rig.upstream.requests(), 0);
    assert_eq!(rig.asked.lock().unwrap().len(), 1);
    let audit = rig.audit(&r);
    assert_eq!(audit["phase"], "refused");
    assert_eq!(audit["code"], "vault_locked");
    assert_eq!(audit["consent"], "approved");
    assert_eq!(audit["dispatches"], 0);
}

#[tokio::test]
async fn a_credential_removed_inside_the_consent_callback_sends_nothing() {
    let upstream = Upstream::start(|_| ok_resource()).await;
    let vault = memory_vault(&upstream.url());
    let admin = Arc::clone(&vault);
    let rig = rig(
        vault,
        upstream,
        tempfile::tempdir().unwrap(),
        move || {
            admin.remove("deploy-api");
        },
        ConsentDecision::Approve,
    )
    .await;
    let r = rig.call(create("ship the fix")).await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(RefusalCode::CredentialUnavailable.into()));
    assert_eq!(
        r.reason.as_deref(),
        Some("credential `deploy-api` was removed during the call; nothing was sent")
    );
    assert_eq!(rig.upstream.requests(), 0);
    assert_eq!(rig.audit(&r)["dispatches"], 0);
}

/// The first request is answered 429 with `Retry-After: 5`; `during_wait` runs while the
/// upstream handles it (the channel is then about to wait).
fn limited_once(
    during_wait: impl Fn() + Send + Sync + 'static,
) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    move |r| {
        if r.n == 1 {
            during_wait();
            Reply::JsonWith(
                429,
                json!({"message": "slow down"}),
                vec![("retry-after".to_owned(), "5".to_owned())],
            )
        } else {
            ok_resource()
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_credential_rotated_during_a_retry_after_wait_is_not_sent_again() {
    let vault: Arc<Mutex<Option<Arc<MemoryVault>>>> = Arc::default();
    let handle = Arc::clone(&vault);
    let upstream = Upstream::start(limited_once(move || {
        if let Some(v) = handle.lock().unwrap().as_ref() {
            VaultAdmin::rotate(v.as_ref(), "deploy-api", Secret::new(ROTATED)).unwrap();
        }
    }))
    .await;
    let rig = rig_sharing_vault(upstream, &vault).await;
    let r = rig.call(create("ship the fix")).await;
    // One request left (and was answered 429); the resend with the replaced value did not.
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(token_seen(&rig.upstream.received()[0]), TOKEN);
    assert_eq!(r.status, Status::Unknown, "{}", r.to_json());
    assert_eq!(r.code, Some(RefusalCode::CredentialUnavailable.into()));
    assert_eq!(
        r.reason.as_deref(),
        Some(
            "the credential changed before the request could be sent again; an earlier request of this call was sent and its outcome is unknown; do not retry"
        )
    );
    assert_eq!(
        r.next.as_ref().map(|n| n.action.as_str()),
        Some("get_deployment")
    );
    let audit = rig.audit(&r);
    assert_eq!(audit["code"], "credential_unavailable");
    assert_eq!(audit["dispatches"], 1);
}

#[tokio::test(start_paused = true)]
async fn a_vault_locked_everywhere_during_a_retry_after_wait_is_not_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.spv");
    let marker_path = path.clone();
    // Another process (`sallyport vault lock`) writes the lock marker while we wait.
    let upstream = Upstream::start(limited_once(move || {
        FileVault::open(&marker_path).lock_everywhere().unwrap();
    }))
    .await;
    let file = Arc::new(FileVault::create(&path, PASSPHRASE, fast_kdf()).unwrap());
    file.add(meta(&upstream.url()), Secret::new(TOKEN)).unwrap();
    let rig = rig(file, upstream, dir, || {}, ConsentDecision::Approve).await;
    let r = rig.call(create("ship the fix")).await;
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(r.status, Status::Unknown, "{}", r.to_json());
    assert_eq!(r.code, Some(RefusalCode::VaultLocked.into()));
    assert_eq!(
        r.reason.as_deref(),
        Some(
            "the vault was locked before the request could be sent again; an earlier request of this call was sent and its outcome is unknown; do not retry"
        )
    );
    assert_eq!(rig.audit(&r)["dispatches"], 1);
}

// ---------------------------------------------------------------- item 1: the echo

#[tokio::test]
async fn an_echo_of_the_credential_is_redacted_although_the_vault_locked_during_the_call() {
    let vault: Arc<Mutex<Option<Arc<MemoryVault>>>> = Arc::default();
    let handle = Arc::clone(&vault);
    // The upstream locks the vault (as auto-lock or `vault lock` would) while it answers,
    // and echoes the token it received.
    let upstream = Upstream::start(move |r| {
        if let Some(v) = handle.lock().unwrap().as_ref() {
            v.lock();
        }
        Reply::Json(
            400,
            json!({"message": format!("credential {} is not valid here", token_seen(r))}),
        )
    })
    .await;
    let rig = rig_sharing_vault(upstream, &vault).await;
    let r = rig.call(create("ship the fix")).await;
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(token_seen(&rig.upstream.received()[0]), TOKEN);
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::BadRequest.into()));
    let reason = r.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with(
            "the upstream rejected the request (HTTP 400): credential [REDACTED] is not valid here"
        ),
        "{reason}"
    );
    assert_no_piece("the result", &r.to_json(), TOKEN);
    assert_eq!(rig.audit(&r)["reason"], reason.as_str());
    assert_journal_clean(&rig.journal, TOKEN);
}

#[tokio::test]
async fn an_echo_of_the_old_value_after_a_rotation_is_redacted_in_a_later_call() {
    let upstream = Upstream::start(|r| {
        if r.n == 1 {
            ok_resource()
        } else {
            // A cache upstream still echoes the value of the first request.
            Reply::Json(
                400,
                json!({"message": format!("credential {TOKEN} was revoked")}),
            )
        }
    })
    .await;
    let vault = memory_vault(&upstream.url());
    let admin = Arc::clone(&vault);
    let rig = rig(
        vault,
        upstream,
        tempfile::tempdir().unwrap(),
        || {},
        ConsentDecision::Approve,
    )
    .await;
    let first = rig.call(create("ship the fix")).await;
    assert_eq!(first.status, Status::Completed);
    VaultAdmin::rotate(admin.as_ref(), "deploy-api", Secret::new(ROTATED)).unwrap();
    let second = rig.call(create("ship it again")).await;
    assert_eq!(rig.upstream.requests(), 2);
    assert_eq!(token_seen(&rig.upstream.received()[1]), ROTATED);
    assert_eq!(second.code, Some(UpstreamCode::BadRequest.into()));
    let reason = second.reason.unwrap_or_default();
    assert!(
        reason.starts_with(
            "the upstream rejected the request (HTTP 400): credential [REDACTED] was revoked"
        ),
        "{reason}"
    );
    assert_journal_clean(&rig.journal, TOKEN);
}

// ---------------------------------------------------------------- item 4: the cancel record

#[tokio::test]
async fn the_record_of_a_call_dropped_while_waiting_for_consent_is_scrubbed() {
    let upstream = Upstream::start(|_| ok_resource()).await;
    let vault = memory_vault(&upstream.url());
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.db");
    let journal_handle = Arc::new(SqliteJournal::open(&journal).unwrap());
    let asked = Arc::new(AtomicU32::new(0));
    let count = Arc::clone(&asked);
    let executor = Executor::builder(catalog())
        .journal_arc(journal_handle.clone())
        .vault_arc(vault)
        .consent(FnConsent::new(move |_| {
            count.fetch_add(1, Ordering::SeqCst);
            // The human never answers.
            std::future::pending::<ConsentDecision>()
        }))
        .channel(
            HttpChannel::builder()
                .base_url(upstream.url())
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let session = Session::new("s1");
    // The agent was fed the token and wrote it into its note.
    let call = executor.call(
        "create_deployment",
        create(&format!("deploy with {TOKEN} now")),
        &session,
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), call)
            .await
            .is_err()
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    // The cancel record is appended in the background.
    let mut record = None;
    for _ in 0..100 {
        let records = journal_handle.records().await.unwrap();
        if let Some(r) = records
            .into_iter()
            .find(|r| r.event.code == Some(UpstreamCode::CancelledBeforeSend.into()))
        {
            record = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let record = record.expect("a cancel record");
    assert_eq!(record.event.status, Status::Rejected);
    assert_eq!(
        record.event.note.as_deref(),
        Some("deploy with [REDACTED] now")
    );
    assert_eq!(upstream.requests(), 0);
    assert_journal_clean(&journal, TOKEN);
}

// ---------------------------------------------------------------- item 3: cuts

#[tokio::test]
async fn a_token_straddling_the_upstream_message_limit_leaves_no_piece_in_the_reason() {
    // 185 bytes, a space, the token, more text: the 200-byte limit falls inside the token.
    let message = format!("{} {TOKEN} {}", "p".repeat(185), "t".repeat(40));
    let upstream = Upstream::start(move |_| Reply::Json(400, json!({"message": message}))).await;
    let vault = memory_vault(&upstream.url());
    let rig = rig(
        vault,
        upstream,
        tempfile::tempdir().unwrap(),
        || {},
        ConsentDecision::Approve,
    )
    .await;
    let r = rig.call(create("ship the fix")).await;
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(r.code, Some(UpstreamCode::BadRequest.into()));
    let reason = r.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with(&format!(
            "the upstream rejected the request (HTTP 400): {} [REDACTED] ttt…",
            "p".repeat(185)
        )),
        "{reason}"
    );
    assert_no_piece("the result", &r.to_json(), TOKEN);
    assert_eq!(rig.audit(&r)["reason"], reason.as_str());
    assert_journal_clean(&rig.journal, TOKEN);
}

#[tokio::test]
async fn a_token_in_the_body_at_any_offset_reaches_neither_the_human_nor_the_audit() {
    let upstream = Upstream::start(|_| ok_resource()).await;
    let vault = memory_vault(&upstream.url());
    let rig = rig(
        vault,
        upstream,
        tempfile::tempdir().unwrap(),
        || {},
        ConsentDecision::Deny { reason: None },
    )
    .await;
    // The agent was fed the token and wrote it into the body, at every offset around where
    // the request summary used to be cut (1,000 bytes): it is shown whole now, and scrubbed
    // whole, whatever the length of the upstream's port.
    let mut results = Vec::new();
    for pad in 850..1000 {
        let build_id = format!("{}{TOKEN}", "p".repeat(pad));
        let args = json!({"project_id": "proj_1", "build_id": build_id, "reason": "ship it"});
        results.push(rig.call(args).await);
    }
    assert_eq!(rig.upstream.requests(), 0);
    let asked = rig.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 150);
    for (prompt, r) in asked.iter().zip(&results) {
        assert_eq!(r.code, Some(RefusalCode::ConsentDenied.into()));
        assert_no_piece("a consent prompt", prompt, TOKEN);
        assert_no_piece("an audit record", &rig.audit(r).to_string(), TOKEN);
    }
    assert_journal_clean(&rig.journal, TOKEN);
}

#[test]
fn a_file_vault_keeps_redacting_replaced_and_removed_values_until_it_locks() {
    let dir = tempfile::tempdir().unwrap();
    let vault = FileVault::create(dir.path().join("v.spv"), PASSPHRASE, fast_kdf()).unwrap();
    vault
        .add(meta("https://api.example.com"), Secret::new(TOKEN))
        .unwrap();
    vault.rotate("deploy-api", Secret::new(ROTATED)).unwrap();
    let text = format!("old {TOKEN} new {ROTATED}");
    assert_eq!(
        vault.scrubber().scrub(&text),
        "old [REDACTED] new [REDACTED]"
    );
    VaultAdmin::remove(&vault, "deploy-api").unwrap();
    assert_eq!(
        vault.scrubber().scrub(&text),
        "old [REDACTED] new [REDACTED]"
    );
    // Locking zeroizes them with everything else.
    vault.lock();
    assert_eq!(vault.scrubber().pattern_count(), 0);
}
