//! The host's own hooks (issue 40 §4) through a real executor, a real SQLite journal and a
//! request-counting HTTP upstream on 127.0.0.1:0: a pre-dispatch hook that denies, times out
//! or panics sends nothing and the record says why; one set to fail open lets the call
//! through and the record says so; a post-result hook masks more or withholds the answer
//! after the request was sent; a hook's reason carrying the vault's secret is scrubbed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sallyport_core::executor::ExecutorBuilder;
use sallyport_core::hooks::{
    HookSettings, PostResultDecision, PostResultHook, PostResultRequest, PreDispatchDecision,
    PreDispatchHook, PreDispatchRequest,
};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::ActionResult;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, EffectClass, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{
    Reply, Upstream, audit_event, journal_dispatches, journal_text,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Read one customer's profile.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_profile", effect = observe, credential = "crm-api")]
#[http(get = "/v1/profiles/{profile_id}", result = Profile)]
struct GetProfile {
    profile_id: String,
}

/// Rename one customer.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "rename_profile", effect = reversible_change, consent = none, credential = "crm-api")]
#[http(post = "/v1/profiles/{profile_id}/name", result = Profile)]
struct RenameProfile {
    profile_id: String,
    name: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Profile {
    id: String,
    email: String,
}

/// The vault's secret: no hook's text may carry it out.
const TOKEN: &str = "crm-token-93kq7zx";

struct Rig {
    upstream: Upstream,
    executor: Executor,
    journal: PathBuf,
    _dir: tempfile::TempDir,
}

async fn rig(hooks: impl FnOnce(ExecutorBuilder) -> ExecutorBuilder) -> Rig {
    let upstream =
        Upstream::start(|_| Reply::Json(200, json!({"id": "p1", "email": "jane.doe@example.com"})))
            .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "crm-api",
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new(TOKEN),
    );
    let catalog = Catalog::builder()
        .action::<GetProfile>()
        .action::<RenameProfile>()
        .build()
        .expect("catalog");
    let builder = Executor::builder(catalog)
        .journal(SqliteJournal::open(&journal).expect("journal"))
        .vault_arc(vault)
        .channel(HttpChannel::builder().build().expect("channel"))
        .hook_timeout(Duration::from_millis(200));
    Rig {
        upstream,
        executor: hooks(builder).build().expect("executor"),
        journal,
        _dir: dir,
    }
}

impl Rig {
    async fn get(&self) -> ActionResult {
        self.executor
            .call("get_profile", json!({"profile_id": "p1"}), &session())
            .await
    }

    async fn rename(&self) -> ActionResult {
        self.executor
            .call(
                "rename_profile",
                json!({"profile_id": "p1", "name": "Jane"}),
                &session(),
            )
            .await
    }

    fn event(&self, result: &ActionResult) -> Value {
        audit_event(&self.journal, result.attempt_id.as_str())
    }
}

fn session() -> Session {
    Session::new("s1").with_attribute("team", "support")
}

/// What a pre-dispatch hook saw of one call.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    action: String,
    effect: EffectClass,
    session: String,
    arguments: Value,
    request: String,
    consent: String,
}

/// What a scripted hook does.
#[derive(Clone)]
enum Act {
    Allow,
    Deny(String),
    Sleep,
    Panic,
}

/// A pre-dispatch hook that does as scripted and remembers what it saw.
struct Scripted {
    act: Act,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    fn new(act: Act) -> (Self, Arc<Mutex<Vec<Seen>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        (
            Self {
                act,
                seen: Arc::clone(&seen),
            },
            seen,
        )
    }
}

#[async_trait]
impl PreDispatchHook for Scripted {
    async fn check(&self, call: &PreDispatchRequest<'_>) -> PreDispatchDecision {
        self.seen.lock().unwrap().push(Seen {
            action: call.action.to_owned(),
            effect: call.effect,
            session: call.session.id().to_string(),
            arguments: call.arguments.clone(),
            request: call.request.to_owned(),
            consent: call.consent.as_str().to_owned(),
        });
        match &self.act {
            Act::Allow => PreDispatchDecision::Allow,
            Act::Deny(reason) => PreDispatchDecision::deny(reason.clone()),
            Act::Sleep => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                PreDispatchDecision::Allow
            }
            Act::Panic => panic!("the ticket system is down"),
        }
    }
}

/// What a scripted post-result hook does.
#[derive(Clone)]
enum Post {
    /// Replace `data.email` with this text.
    MaskEmail(String),
    Refuse(String),
    Sleep,
    Panic,
}

/// A post-result hook that does as scripted and counts its runs.
struct PostScripted {
    act: Post,
    runs: Arc<AtomicU32>,
}

impl PostScripted {
    fn new(act: Post) -> (Self, Arc<AtomicU32>) {
        let runs = Arc::new(AtomicU32::new(0));
        (
            Self {
                act,
                runs: Arc::clone(&runs),
            },
            runs,
        )
    }
}

#[async_trait]
impl PostResultHook for PostScripted {
    async fn check(&self, call: &PostResultRequest<'_>) -> PostResultDecision {
        self.runs.fetch_add(1, Ordering::SeqCst);
        match &self.act {
            Post::MaskEmail(with) => {
                let mut edited = call.result.clone();
                if let Some(data) = edited.data.as_mut() {
                    data["email"] = Value::String(with.clone());
                }
                PostResultDecision::Mask(Box::new(edited))
            }
            Post::Refuse(reason) => PostResultDecision::refuse(reason.clone()),
            Post::Sleep => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                PostResultDecision::Keep
            }
            Post::Panic => panic!("the classifier crashed"),
        }
    }
}

#[tokio::test]
async fn a_pre_dispatch_deny_sends_nothing_and_the_record_names_the_hook() {
    let (hook, seen) = Scripted::new(Act::Deny("no open ticket for profile p1".to_owned()));
    let r = rig(|b| b.pre_dispatch_hook("ticket-check", hook)).await;
    let result = r.rename().await;
    assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
    assert_eq!(result.code_str(), Some("hook_denied"));
    assert_eq!(
        result.reason.as_deref(),
        Some(
            "the host's check `ticket-check` denied the call: no open ticket for profile p1; nothing was sent"
        )
    );
    assert_eq!(r.upstream.requests(), 0);
    assert_eq!(
        journal_dispatches(&r.journal, result.attempt_id.as_str()),
        0
    );
    let event = r.event(&result);
    assert_eq!(event["phase"], "refused");
    assert_eq!(event["code"], "hook_denied");
    assert_eq!(event["dispatches"], 0);
    assert_eq!(
        event["hooks"],
        json!([{"name": "ticket-check", "stage": "pre_dispatch", "outcome": "denied",
                "reason": "no open ticket for profile p1"}])
    );
    // The hook saw the call as the human would approve it, the real destination included.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].action, "rename_profile");
    assert_eq!(seen[0].effect, EffectClass::ReversibleChange);
    assert_eq!(seen[0].session, "s1");
    assert_eq!(
        seen[0].arguments,
        json!({"profile_id": "p1", "name": "Jane"})
    );
    assert_eq!(seen[0].consent, "not_required");
    assert!(
        seen[0].request.starts_with("POST ")
            && seen[0]
                .request
                .contains(&format!("{}/v1/profiles/p1/name", r.upstream.url())),
        "{}",
        seen[0].request
    );
}

#[tokio::test]
async fn a_pre_dispatch_hook_that_times_out_fails_closed_and_sends_nothing() {
    let (hook, _) = Scripted::new(Act::Sleep);
    let r = rig(|b| {
        b.pre_dispatch_hook_with(
            "slow-check",
            hook,
            HookSettings::new().with_timeout(Duration::from_millis(100)),
        )
    })
    .await;
    let started = std::time::Instant::now();
    let result = r.get().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the timeout bounds the call"
    );
    assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
    assert_eq!(result.code_str(), Some("hook_denied"));
    assert_eq!(
        result.reason.as_deref(),
        Some(
            "the host's check `slow-check` did not answer within 100ms, so the call fails closed; nothing was sent"
        )
    );
    assert_eq!(r.upstream.requests(), 0);
    let event = r.event(&result);
    assert_eq!(event["phase"], "refused");
    assert_eq!(
        event["hooks"],
        json!([{"name": "slow-check", "stage": "pre_dispatch", "outcome": "timeout",
                "reason": "did not answer within 100ms"}])
    );
}

#[tokio::test]
async fn a_pre_dispatch_hook_that_panics_fails_closed_and_sends_nothing() {
    let (hook, _) = Scripted::new(Act::Panic);
    let r = rig(|b| b.pre_dispatch_hook("ticket-check", hook)).await;
    let result = r.rename().await;
    assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
    assert_eq!(result.code_str(), Some("hook_denied"));
    assert_eq!(r.upstream.requests(), 0);
    assert_eq!(
        journal_dispatches(&r.journal, result.attempt_id.as_str()),
        0
    );
    let event = r.event(&result);
    assert_eq!(
        event["hooks"],
        json!([{"name": "ticket-check", "stage": "pre_dispatch", "outcome": "panic",
                "reason": "panicked"}])
    );
    // The executor goes on serving calls after a hook's panic.
    let again = r.rename().await;
    assert_eq!(again.code_str(), Some("hook_denied"));
}

#[tokio::test]
async fn hooks_set_to_fail_open_let_the_call_through_and_the_record_says_so() {
    let (slow, _) = Scripted::new(Act::Sleep);
    let (panics, _) = Scripted::new(Act::Panic);
    let r = rig(|b| {
        b.pre_dispatch_hook_with(
            "slow-audit",
            slow,
            HookSettings::new()
                .with_timeout(Duration::from_millis(50))
                .fail_open(),
        )
        .pre_dispatch_hook_with("crashy-audit", panics, HookSettings::new().fail_open())
    })
    .await;
    let result = r.rename().await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(r.upstream.requests(), 1);
    let event = r.event(&result);
    assert_eq!(event["phase"], "finished");
    assert_eq!(
        event["hooks"],
        json!([
            {"name": "slow-audit", "stage": "pre_dispatch", "outcome": "failed_open",
             "reason": "did not answer within 50ms; failed open"},
            {"name": "crashy-audit", "stage": "pre_dispatch", "outcome": "failed_open",
             "reason": "panicked; failed open"},
        ])
    );
}

#[tokio::test]
async fn the_first_denial_ends_the_run_and_a_later_hook_is_not_asked() {
    let (allow, allowed) = Scripted::new(Act::Allow);
    let (deny, _) = Scripted::new(Act::Deny("frozen account".to_owned()));
    let (later, asked_later) = Scripted::new(Act::Allow);
    let r = rig(|b| {
        b.pre_dispatch_hook("first", allow)
            .pre_dispatch_hook("second", deny)
            .pre_dispatch_hook("third", later)
    })
    .await;
    let result = r.get().await;
    assert_eq!(result.code_str(), Some("hook_denied"));
    assert_eq!(r.upstream.requests(), 0);
    assert_eq!(allowed.lock().unwrap().len(), 1);
    assert_eq!(asked_later.lock().unwrap().len(), 0);
    let event = r.event(&result);
    assert_eq!(
        event["hooks"],
        json!([
            {"name": "first", "stage": "pre_dispatch", "outcome": "allowed"},
            {"name": "second", "stage": "pre_dispatch", "outcome": "denied",
             "reason": "frozen account"},
        ])
    );
}

#[tokio::test]
async fn a_post_result_hook_masks_more_and_the_record_names_it() {
    let (allow, _) = Scripted::new(Act::Allow);
    let (mask, runs) = PostScripted::new(Post::MaskEmail("j***@example.com".to_owned()));
    let r = rig(|b| {
        b.pre_dispatch_hook("ticket-check", allow)
            .post_result_hook("pii-mask", mask)
    })
    .await;
    let result = r.get().await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(
        result.data,
        Some(json!({"id": "p1", "email": "j***@example.com"}))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(r.upstream.requests(), 1);
    let event = r.event(&result);
    assert_eq!(event["status"], "completed");
    assert_eq!(
        event["hooks"],
        json!([
            {"name": "ticket-check", "stage": "pre_dispatch", "outcome": "allowed"},
            {"name": "pii-mask", "stage": "post_result", "outcome": "masked"},
        ])
    );
    assert!(!journal_text(&r.journal).contains("jane.doe@example.com"));
}

#[tokio::test]
async fn a_post_result_refusal_withholds_the_data_after_the_request_was_sent() {
    let (refuse, _) = PostScripted::new(Post::Refuse("answer names a minor".to_owned()));
    let r = rig(|b| b.post_result_hook("minors", refuse)).await;
    let result = r.get().await;
    assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
    assert_eq!(result.code_str(), Some("hook_refused"));
    assert_eq!(result.data, None);
    assert_eq!(
        result.reason.as_deref(),
        Some(
            "the host's check `minors` withheld the answer: answer names a minor; the request was sent; nothing changed upstream"
        )
    );
    assert!(!result.to_json().contains("jane.doe"));
    assert_eq!(r.upstream.requests(), 1);
    let event = r.event(&result);
    assert_eq!(event["phase"], "finished");
    assert_eq!(event["dispatches"], 1);
    assert_eq!(event["upstream_status"], 200);
    assert_eq!(event["code"], "hook_refused");
    assert_eq!(
        event["hooks"],
        json!([{"name": "minors", "stage": "post_result", "outcome": "refused",
                "reason": "answer names a minor"}])
    );
}

#[tokio::test]
async fn a_post_result_refusal_of_a_change_keeps_the_status_the_upstream_gave() {
    let (refuse, _) = PostScripted::new(Post::Refuse("no".to_owned()));
    let r = rig(|b| b.post_result_hook("minors", refuse)).await;
    let result = r.rename().await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(result.code_str(), Some("hook_refused"));
    assert_eq!(result.data, None);
    assert_eq!(r.upstream.requests(), 1);
    assert_eq!(
        journal_dispatches(&r.journal, result.attempt_id.as_str()),
        1
    );
}

#[tokio::test]
async fn a_post_result_hook_that_panics_or_times_out_withholds_the_answer() {
    let (panics, _) = PostScripted::new(Post::Panic);
    let r = rig(|b| b.post_result_hook("classifier", panics)).await;
    let result = r.get().await;
    assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
    assert_eq!(result.code_str(), Some("hook_refused"));
    assert_eq!(result.data, None);
    assert_eq!(r.upstream.requests(), 1);
    assert_eq!(
        r.event(&result)["hooks"],
        json!([{"name": "classifier", "stage": "post_result", "outcome": "panic",
                "reason": "panicked"}])
    );

    let (slow, _) = PostScripted::new(Post::Sleep);
    let r = rig(|b| b.post_result_hook("classifier", slow)).await;
    let result = r.get().await;
    assert_eq!(result.code_str(), Some("hook_refused"));
    assert_eq!(result.data, None);
    assert_eq!(
        result.reason.as_deref(),
        Some(
            "the host's check `classifier` did not answer within 200ms, so the answer is withheld; the request was sent; nothing changed upstream"
        )
    );
    assert_eq!(
        r.event(&result)["hooks"],
        json!([{"name": "classifier", "stage": "post_result", "outcome": "timeout",
                "reason": "did not answer within 200ms"}])
    );
}

#[tokio::test]
async fn a_post_result_hook_set_to_fail_open_keeps_the_answer() {
    let (panics, _) = PostScripted::new(Post::Panic);
    let r = rig(|b| b.post_result_hook_with("classifier", panics, HookSettings::new().fail_open()))
        .await;
    let result = r.get().await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(
        result.data,
        Some(json!({"id": "p1", "email": "jane.doe@example.com"}))
    );
    assert_eq!(
        r.event(&result)["hooks"],
        json!([{"name": "classifier", "stage": "post_result", "outcome": "failed_open",
                "reason": "panicked; failed open"}])
    );
}

#[tokio::test]
async fn the_vault_secret_in_a_hook_text_is_scrubbed_everywhere() {
    // A deny reason carrying the credential.
    let (deny, _) = Scripted::new(Act::Deny(format!("token {TOKEN} is on the deny list")));
    let r = rig(|b| b.pre_dispatch_hook("canary", deny)).await;
    let result = r.get().await;
    assert_eq!(result.code_str(), Some("hook_denied"));
    assert_eq!(r.upstream.requests(), 0);
    let reason = result.reason.clone().unwrap_or_default();
    assert!(reason.contains("is on the deny list"), "{reason}");
    assert!(!result.to_json().contains(TOKEN), "{}", result.to_json());
    let stored = journal_text(&r.journal);
    assert!(stored.contains("is on the deny list"));
    assert!(!stored.contains(TOKEN), "{stored}");

    // A post-result hook that writes the credential into the answer, and one that refuses
    // with it in its reason.
    let (leak, _) = PostScripted::new(Post::MaskEmail(format!("key={TOKEN}")));
    let r = rig(|b| b.post_result_hook("leaky-mask", leak)).await;
    let result = r.get().await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    let email = result.data.as_ref().map(|d| d["email"].clone());
    assert!(
        email
            .as_ref()
            .and_then(Value::as_str)
            .is_some_and(|e| e.starts_with("key=")),
        "{email:?}"
    );
    assert!(!result.to_json().contains(TOKEN), "{}", result.to_json());
    let (refuse, _) = PostScripted::new(Post::Refuse(format!("saw {TOKEN}")));
    let r = rig(|b| b.post_result_hook("leaky-refusal", refuse)).await;
    let result = r.get().await;
    assert_eq!(result.code_str(), Some("hook_refused"));
    assert!(!result.to_json().contains(TOKEN), "{}", result.to_json());
    assert!(!journal_text(&r.journal).contains(TOKEN));
}

#[tokio::test]
async fn an_executor_without_hooks_writes_no_hooks_field() {
    let r = rig(|b| b).await;
    let result = r.get().await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    let event = r.event(&result);
    assert!(event.get("hooks").is_none(), "{event}");
}
