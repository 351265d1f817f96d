//! The canary: three credentials whose values must never appear — raw; base64 at each
//! alignment (standard and URL-safe, with and without padding); percent-encoded as every
//! common encoder writes it (every non-alphanumeric, form-urlencoded, RFC 3986,
//! `encodeURIComponent`, Python `quote()`, each with upper- and lowercase hex); JSON-escaped
//! (with and without `\/`); hex in both cases — in any result the agent gets, any audit record
//! (read back and exported), the journal files, any consent prompt, any captured tracing line
//! at TRACE level, or any `Debug` output, across the executor scenarios: a hostile upstream
//! echoing the credential in every encoding, a 401 that echoes the Authorization header, an
//! unknown outcome, a locked vault, a refused argument carrying the value, a consent denial,
//! a real HTTP upstream echoing a query API key with URL-special characters as its own
//! encoder writes it, and a call parked for approval whose agent-written header is shown to
//! the approver with its value while the header API key the vault attaches is never shown.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use sallyport_core::channel::ChannelOutcome;
use sallyport_core::code::{RefusalCode, UpstreamCode};
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::{Journal, SqliteJournal, export_json_lines};
use sallyport_core::outcome::ActionResult;
use sallyport_core::outcome::{Next, Status};
use sallyport_core::vault::{
    ApiKeyPlacement, Binding, CredentialKind, CredentialMeta, FileVault, Secret, VaultAdmin,
};
use sallyport_core::{Catalog, Executor, Session};
use sallyport_tests::vault_rig::{
    DeployPreview, PASSPHRASE, ReadStatus, ScriptedChannel, bearer, fast_kdf,
};

/// The bearer canary: characters that every encoding changes (`/`, `+`, `=`, `"`, `\`, `é`).
const CANARY: &str = "cnry-7Qx/9+Zk=2Lm\"w\\é-tok";
/// The basic-auth canary (a password; the header carries `robot:<password>` in base64).
const CANARY_B: &str = "pw-Canary+8841/zz";
/// The query-API-key canary: every character URL encoders disagree about (`/ + = . _ ~ -`).
const CANARY_URL: &str = "sk-live/Ab+12=x.y_z~Q";

/// Percent-encodes every byte but ASCII alphanumerics and `bare`, with upper- or lowercase hex.
fn percent(secret: &str, bare: &str, upper: bool) -> String {
    secret
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || bare.as_bytes().contains(&b) {
                (b as char).to_string()
            } else if upper {
                format!("%{b:02X}")
            } else {
                format!("%{b:02x}")
            }
        })
        .collect()
}

/// `secret` as the `url` crate's form-urlencoded serializer writes a query value (what
/// reqwest sends for a query API key).
fn form_urlencoded(secret: &str) -> String {
    let mut url = reqwest::Url::parse("http://x/").unwrap();
    url.query_pairs_mut().append_pair("k", secret);
    url.query().unwrap()[2..].to_owned()
}

/// Every complete percent-encoded form: all non-alphanumerics, form-urlencoded, RFC 3986,
/// `encodeURIComponent`, Python `quote()`; each with upper- and lowercase hex.
fn percent_forms(secret: &str) -> Vec<String> {
    let form = form_urlencoded(secret);
    let mut forms = vec![form.clone(), lowercase_hex(&form)];
    for bare in ["", "-._~", "-_.!~*'()", "-._~/"] {
        forms.push(percent(secret, bare, true));
        forms.push(percent(secret, bare, false));
    }
    forms
}

/// `text` with the two hex digits after every `%` lowercased.
fn lowercase_hex(text: &str) -> String {
    let mut out = String::new();
    let mut left = 0;
    for c in text.chars() {
        if c == '%' {
            left = 2;
            out.push(c);
        } else if left > 0 {
            left -= 1;
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Every form of `secret` that must not appear, including base64 fragments at all three
/// alignments (trimmed so the characters that depend on neighbouring bytes are not required).
fn forbidden_forms(secret: &str) -> Vec<String> {
    let mut forms = vec![secret.to_owned()];
    let json = serde_json::to_string(secret).unwrap();
    forms.push(json[1..json.len() - 1].to_owned());
    forms.push(percent(secret, "", true));
    forms.push(percent(secret, "", false));
    forms.push(hex::encode(secret));
    forms.push(hex::encode_upper(secret));
    forms.push(json[1..json.len() - 1].replace('/', "\\/"));
    forms.extend(percent_forms(secret));
    for prefix in ["", "x", "xy"] {
        let bytes = format!("{prefix}{secret}");
        for encoded in [STANDARD.encode(&bytes), URL_SAFE_NO_PAD.encode(&bytes)] {
            let encoded = encoded.trim_end_matches('=');
            forms.push(encoded[4..encoded.len() - 4].to_owned());
        }
    }
    forms
}

fn assert_clean(what: &str, text: &str) {
    for secret in [CANARY, CANARY_B, CANARY_URL] {
        for form in forbidden_forms(secret) {
            assert!(
                !text.contains(&form),
                "{what} carries a canary form {form:?}:\n{text}"
            );
        }
    }
}

/// Every tracing line of this test binary, at TRACE level.
fn log_buffer() -> Arc<Mutex<Vec<u8>>> {
    static BUFFER: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    BUFFER
        .get_or_init(|| {
            let buffer = Arc::new(Mutex::new(Vec::new()));
            let writer = Arc::clone(&buffer);
            tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_ansi(false)
                .with_writer(move || BufferWriter(Arc::clone(&writer)))
                .init();
            buffer
        })
        .clone()
}

struct BufferWriter(Arc<Mutex<Vec<u8>>>);

impl Write for BufferWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct Rig {
    _dir: tempfile::TempDir,
    vault: Arc<FileVault>,
    journal: Arc<SqliteJournal>,
    channel_sends: Arc<std::sync::atomic::AtomicU32>,
    executor: Executor,
}

fn rig(script: impl Fn() -> ChannelOutcome + Send + Sync + 'static, deny: bool) -> Rig {
    rig_with(script, deny, true)
}

/// `check_consent`: assert that the consent request shown to the human carries no canary
/// (the executor scrubs the request, the agent's note included, before asking).
fn rig_with(
    script: impl Fn() -> ChannelOutcome + Send + Sync + 'static,
    deny: bool,
    check_consent: bool,
) -> Rig {
    log_buffer();
    let dir = tempfile::tempdir().unwrap();
    let vault =
        Arc::new(FileVault::create(dir.path().join("v.spv"), PASSPHRASE, fast_kdf()).unwrap());
    vault
        .add(
            bearer("deploy-api", "https://api.example.com"),
            Secret::new(CANARY),
        )
        .unwrap();
    vault
        .add(
            CredentialMeta::new(
                "basic-api",
                CredentialKind::Basic {
                    user: "robot".into(),
                },
                Binding::url("https://basic.example.com"),
            ),
            Secret::new(CANARY_B),
        )
        .unwrap();
    vault
        .add(
            CredentialMeta::new(
                "url-api",
                CredentialKind::ApiKey {
                    placement: ApiKeyPlacement::Query("api_key".into()),
                },
                Binding::url("https://reports.example.com"),
            ),
            Secret::new(CANARY_URL),
        )
        .unwrap();
    let journal = Arc::new(SqliteJournal::open(dir.path().join("journal.db")).unwrap());
    let channel = ScriptedChannel::new(move |_| script());
    let channel_sends = Arc::clone(&channel.sends);
    let catalog = Catalog::builder()
        .action::<DeployPreview>()
        .action::<ReadStatus>()
        .build()
        .unwrap();
    let executor = Executor::builder(catalog)
        .journal_arc(journal.clone())
        .channel(channel)
        .vault_arc(vault.clone())
        .consent(FnConsent::new(move |request| async move {
            if check_consent {
                assert_clean("the consent request", &request.render());
            }
            if deny {
                ConsentDecision::Deny {
                    reason: Some("not today".into()),
                }
            } else {
                ConsentDecision::Approve
            }
        }))
        .build()
        .unwrap();
    Rig {
        _dir: dir,
        vault,
        journal,
        channel_sends,
        executor,
    }
}

/// The complete encodings of `secret` an upstream might echo: raw, JSON-escaped, URL-encoded
/// (both hex cases), hex (both cases), and base64 (standard padded, URL-safe unpadded) of the
/// secret alone and after one and two other bytes.
fn full_encodings(secret: &str) -> Vec<String> {
    let mut forms = forbidden_forms(secret)[..7].to_vec();
    forms.extend(percent_forms(secret));
    for prefix in ["", "x", "xy"] {
        let bytes = format!("{prefix}{secret}");
        forms.push(STANDARD.encode(&bytes));
        forms.push(STANDARD_NO_PAD.encode(&bytes));
        forms.push(URL_SAFE.encode(&bytes));
        forms.push(URL_SAFE_NO_PAD.encode(&bytes));
    }
    forms
}

/// The whole credential echoed back in every encoding, in data keys and values, reason, code
/// and the follow-up call.
fn hostile_echo() -> ChannelOutcome {
    let basic = STANDARD.encode(format!("robot:{CANARY_B}"));
    let forms: Vec<String> = full_encodings(CANARY)
        .into_iter()
        .chain(full_encodings(CANARY_B))
        .chain(full_encodings(CANARY_URL))
        .chain([format!("Basic {basic}")])
        .collect();
    ChannelOutcome::completed(serde_json::json!({
        "echo": forms,
        CANARY: "as a key",
        "debug": format!("Authorization: Bearer {CANARY}\nX-Debug: {}", hex::encode(CANARY)),
        "nested": {"deeper": [format!("prefix{CANARY}suffix"), serde_json::to_string(CANARY).unwrap()]},
    }))
    .with_reason(format!("upstream said token={CANARY} basic={basic}"))
    .with_code(format!("code-{CANARY}"))
    .with_next(Next {
        action: "read_status".into(),
        arguments: serde_json::json!({"project": CANARY}),
    })
}

async fn check_everything(rig: &Rig, results: &[ActionResult]) {
    for result in results {
        assert_clean("a result", &result.to_json());
        assert_clean("a result's Debug", &format!("{result:?}"));
        assert_clean("a result's summary", &result.summary());
    }
    let records = rig.journal.records().await.unwrap();
    assert!(!records.is_empty());
    for record in &records {
        assert_clean("an audit record", &serde_json::to_string(record).unwrap());
    }
    let mut export = Vec::new();
    export_json_lines(rig.journal.as_ref(), &mut export)
        .await
        .unwrap();
    assert_clean("the audit export", &String::from_utf8(export).unwrap());
    assert_clean("the vault's Debug", &format!("{:?}", rig.vault));
    let logs = String::from_utf8(log_buffer().lock().unwrap().clone()).unwrap();
    assert_clean("the tracing output", &logs);
}

fn deploy_args() -> serde_json::Value {
    serde_json::json!({"project": "p1", "reason": "ship preview 42"})
}

#[tokio::test]
async fn a_hostile_upstream_echoing_the_credential_in_every_encoding_leaks_nothing() {
    let rig = rig(hostile_echo, false);
    let session = Session::new("canary-echo");
    let result = rig
        .executor
        .call("deploy_preview", deploy_args(), &session)
        .await;
    assert_eq!(result.status, Status::Completed);
    assert_eq!(rig.channel_sends.load(Ordering::SeqCst), 1);
    let json = result.to_json();
    assert!(json.contains("[REDACTED]"), "{json}");
    assert_eq!(
        result.reason.as_deref(),
        // Only the base64 characters made of the neighbours' bits stay (`robot:` and the padding).
        Some("upstream said token=[REDACTED] basic=cm9ib3Q6[REDACTED]o=")
    );
    assert_eq!(result.code_str(), Some("code-[REDACTED]"));
    assert_eq!(
        result.next.as_ref().map(|n| n.arguments.clone()),
        Some(serde_json::json!({"project": "[REDACTED]"}))
    );
    check_everything(&rig, &[result]).await;
}

#[tokio::test]
async fn a_401_echoing_the_authorization_header_leaks_nothing_and_is_not_retried() {
    let rig = rig(
        || {
            ChannelOutcome::new(Status::Rejected)
                .with_code("auth_failed")
                .with_reason(format!(
                    "401 Unauthorized; you sent Authorization: Bearer {CANARY}"
                ))
                .with_credential_rejected()
                .with_upstream_status(401)
        },
        false,
    );
    let session = Session::new("canary-401");
    let first = rig
        .executor
        .call("deploy_preview", deploy_args(), &session)
        .await;
    assert_eq!(first.status, Status::Rejected);
    assert_eq!(
        first.reason.as_deref(),
        Some("401 Unauthorized; you sent Authorization: Bearer [REDACTED]")
    );
    let second = rig
        .executor
        .call("deploy_preview", deploy_args(), &session)
        .await;
    assert_eq!(second.code, Some(RefusalCode::CredentialUnavailable.into()));
    assert_eq!(rig.channel_sends.load(Ordering::SeqCst), 1);
    check_everything(&rig, &[first, second]).await;
}

#[tokio::test]
async fn an_unknown_outcome_carrying_the_credential_leaks_nothing() {
    let rig = rig(
        || {
            ChannelOutcome::new(Status::Unknown)
                .with_code("timeout_after_send")
                .with_reason(format!(
                    "timed out; last bytes {} {}",
                    hex::encode(CANARY),
                    STANDARD.encode(format!("robot:{CANARY_B}"))
                ))
        },
        false,
    );
    let session = Session::new("canary-unknown");
    let result = rig
        .executor
        .call("deploy_preview", deploy_args(), &session)
        .await;
    assert_eq!(result.status, Status::Unknown);
    assert_eq!(
        result.reason.as_deref(),
        Some("timed out; last bytes [REDACTED] cm9ib3Q6[REDACTED]o=")
    );
    check_everything(&rig, &[result]).await;
}

#[tokio::test]
async fn arguments_and_notes_carrying_the_value_are_scrubbed_from_results_and_audit() {
    let rig = rig_with(hostile_echo, false, true);
    let session = Session::new("canary-args");
    // An unknown field carrying the value: refused; divergences never echo values.
    let refused = rig
        .executor
        .call(
            "deploy_preview",
            serde_json::json!({"project": "p1", "reason": "ship it now", "token": CANARY}),
            &session,
        )
        .await;
    assert_eq!(refused.code, Some(RefusalCode::InvalidArguments.into()));
    // An agent that was fed the value writes it into its free-text note.
    let noted = rig
        .executor
        .call(
            "deploy_preview",
            serde_json::json!({"project": "p1", "reason": format!("use {CANARY} please")}),
            &session,
        )
        .await;
    assert_eq!(noted.status, Status::Completed);
    let records = rig.journal.records().await.unwrap();
    assert_eq!(
        records.last().unwrap().event.note.as_deref(),
        Some("use [REDACTED] please")
    );
    // A plain argument carrying it.
    let read = rig
        .executor
        .call(
            "read_status",
            serde_json::json!({"project": CANARY}),
            &session,
        )
        .await;
    assert_eq!(read.status, Status::Completed);
    // An action named after the value: refused, and the name is not echoed.
    let unknown = rig
        .executor
        .call(CANARY, serde_json::json!({}), &session)
        .await;
    assert_eq!(unknown.code, Some(RefusalCode::UnknownAction.into()));
    check_everything(&rig, &[refused, noted, read, unknown]).await;
    // The journal file itself (intent rows keep arguments for reconcile) holds no raw value.
    let db = std::fs::read(rig._dir.path().join("journal.db")).unwrap();
    let wal = std::fs::read(rig._dir.path().join("journal.db-wal")).unwrap_or_default();
    for bytes in [db, wal] {
        assert!(
            !bytes.windows(CANARY.len()).any(|w| w == CANARY.as_bytes()),
            "the journal file holds the raw value"
        );
    }
}

#[tokio::test]
async fn a_locked_vault_and_a_denied_consent_leak_nothing() {
    let rig = rig(hostile_echo, true);
    let session = Session::new("canary-deny");
    let denied = rig
        .executor
        .call("deploy_preview", deploy_args(), &session)
        .await;
    assert_eq!(denied.code, Some(RefusalCode::ConsentDenied.into()));
    rig.vault.lock_everywhere().unwrap();
    let locked = rig
        .executor
        .call("deploy_preview", deploy_args(), &session)
        .await;
    assert_eq!(locked.code, Some(RefusalCode::VaultLocked.into()));
    let locked_read = rig
        .executor
        .call(
            "read_status",
            serde_json::json!({"project": "p1"}),
            &session,
        )
        .await;
    assert_eq!(locked_read.code, Some(RefusalCode::VaultLocked.into()));
    assert_eq!(rig.channel_sends.load(Ordering::SeqCst), 0);
    check_everything(&rig, &[denied, locked, locked_read]).await;
}

/// Read one report, authenticated by a query API key (sent by the real HTTP channel).
#[derive(sallyport_core::Action, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[action(name = "get_report", effect = observe, credential = "url-api", consent = per_call)]
#[http(get = "/v1/reports/{report_id}", query(filter), result = Report)]
struct GetReport {
    report_id: String,
    filter: String,
}

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Report {
    id: String,
    echo: Vec<String>,
    query: String,
}

/// The value of `api_key` in a raw query string, still encoded.
fn api_key_in(query: &str) -> String {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("api_key="))
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_real_upstream_echoing_a_query_api_key_as_its_encoder_writes_it_leaks_nothing() {
    use sallyport_core::target::Target;
    use sallyport_tests::http_server::{Reply, Upstream};
    log_buffer();
    // The upstream echoes the query exactly as it received it (reqwest's form-urlencoding of
    // the key), and the key in every other encoding, in result fields and in its message.
    let upstream = Upstream::start(|r| {
        let query = r.query.clone().unwrap_or_default();
        if r.n == 1 {
            let mut echo = full_encodings(CANARY_URL);
            echo.push(api_key_in(&query));
            Reply::Json(
                200,
                serde_json::json!({"id": "r1", "echo": echo, "query": query}),
            )
        } else {
            Reply::Json(
                400,
                serde_json::json!({"message": format!("unknown key {}", api_key_in(&query))}),
            )
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let vault =
        Arc::new(FileVault::create(dir.path().join("v.spv"), PASSPHRASE, fast_kdf()).unwrap());
    vault
        .add(
            CredentialMeta::new(
                "url-api",
                CredentialKind::ApiKey {
                    placement: ApiKeyPlacement::Query("api_key".into()),
                },
                Binding::url(upstream.url()),
            ),
            Secret::new(CANARY_URL),
        )
        .unwrap();
    let journal_path = dir.path().join("journal.db");
    let journal = Arc::new(SqliteJournal::open(&journal_path).unwrap());
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&prompts);
    let catalog = Catalog::builder()
        .action_with_spec::<GetReport>(|mut spec| {
            if let Target::Http(t) = &mut spec.target {
                t.message_field = Some("/message".into());
            }
            spec
        })
        .build()
        .unwrap();
    let executor = Executor::builder(catalog)
        .journal_arc(journal.clone())
        .vault_arc(vault.clone())
        .channel(
            sallyport_http::HttpChannel::builder()
                .base_url(upstream.url())
                .build()
                .unwrap(),
        )
        .consent(FnConsent::new(move |request| {
            seen.lock().unwrap().push(request.render());
            async { ConsentDecision::Approve }
        }))
        .build()
        .unwrap();
    let session = Session::new("canary-http");
    // The agent was fed the key and passes it as a filter value too.
    let args = serde_json::json!({"report_id": "r1", "filter": CANARY_URL});
    let first = executor.call("get_report", args.clone(), &session).await;
    let second = executor.call("get_report", args, &session).await;
    assert_eq!(upstream.requests(), 2);
    let sent = upstream.received()[0].query.clone().unwrap_or_default();
    assert_eq!(api_key_in(&sent), form_urlencoded(CANARY_URL));
    assert_eq!(first.status, Status::Completed, "{}", first.to_json());
    let data = first.data.clone().unwrap_or_default();
    for echoed in data["echo"].as_array().unwrap() {
        assert!(echoed.as_str().unwrap().contains("[REDACTED]"), "{echoed}");
    }
    assert_eq!(data["query"], "filter=[REDACTED]&api_key=[REDACTED]");
    assert_eq!(second.code, Some(UpstreamCode::BadRequest.into()));
    assert!(
        second
            .reason
            .as_deref()
            .unwrap_or_default()
            .starts_with("the upstream rejected the request (HTTP 400): unknown key [REDACTED]"),
        "{:?}",
        second.reason
    );
    let prompts = prompts.lock().unwrap().clone();
    assert_eq!(prompts.len(), 2);
    for prompt in &prompts {
        assert_clean("a consent prompt", prompt);
    }
    let rig = Rig {
        _dir: dir,
        vault,
        journal,
        channel_sends: Arc::default(),
        executor,
    };
    check_everything(&rig, &[first, second]).await;
    for file in ["journal.db", "journal.db-wal"] {
        let bytes = std::fs::read(rig._dir.path().join(file)).unwrap_or_default();
        for form in forbidden_forms(CANARY_URL) {
            assert!(
                !bytes.windows(form.len()).any(|w| w == form.as_bytes()),
                "{file} holds {form:?}"
            );
        }
    }
}

/// The header API-key canary: attached by the vault at dispatch, in a header of its own.
const CANARY_H: &str = "hk-Canary/7+Zq=Hdr~9x";

/// Refund one charge; the agent's note goes upstream as a header.
#[derive(
    Debug, sallyport_core::Action, serde::Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[action(name = "refund_charge", effect = external_commitment, credential = "header-api")]
#[http(post = "/v1/charges/{charge_id}/refunds", header("X-Refund-Note" = note), result = RefundShape)]
#[serde(deny_unknown_fields)]
struct RefundCharge {
    charge_id: String,
    note: String,
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct RefundShape {
    id: String,
}

/// What a human approving the call reads (the stored approval's request, as the console and
/// `approvals show` print it) shows the agent's header with its value; the credential the
/// vault attaches as a header at dispatch is in none of it, nor in the approval, the audit
/// chain, the export, the journal files or the logs — and it is on the request that was sent.
#[tokio::test]
async fn an_approver_sees_every_header_value_and_never_the_credential_header() {
    use sallyport_core::approval::{self, ApprovalState, ConsentMode, Decider, Verdict};
    use sallyport_tests::http_server::{Reply, Upstream};
    log_buffer();
    let upstream = Upstream::start(|_| Reply::Json(201, serde_json::json!({"id": "re_1"}))).await;
    let dir = tempfile::tempdir().unwrap();
    let vault =
        Arc::new(FileVault::create(dir.path().join("v.spv"), PASSPHRASE, fast_kdf()).unwrap());
    vault
        .add(
            CredentialMeta::new(
                "header-api",
                CredentialKind::ApiKey {
                    placement: ApiKeyPlacement::Header("X-Api-Key".into()),
                },
                Binding::url(upstream.url()),
            ),
            Secret::new(CANARY_H),
        )
        .unwrap();
    let journal = Arc::new(SqliteJournal::open(dir.path().join("journal.db")).unwrap());
    let executor = Executor::builder(Catalog::builder().action::<RefundCharge>().build().unwrap())
        .journal_arc(journal.clone())
        .vault_arc(vault.clone())
        .channel(sallyport_http::HttpChannel::builder().build().unwrap())
        .consent_mode(ConsentMode::Deferred)
        .build()
        .unwrap();
    let session = Session::new("canary-approver").requested_by("billing-bot");
    let note = "duplicate charge, customer \"Ann\" asked";
    let parked = executor
        .call(
            "refund_charge",
            serde_json::json!({"charge_id": "ch_1", "note": note}),
            &session,
        )
        .await;
    assert_eq!(parked.status, Status::Pending, "{}", parked.to_json());
    assert_eq!(upstream.requests(), 0);
    let id = parked.approval_id.clone().expect("approval id");
    let store = executor
        .approval_store()
        .expect("an approval store")
        .clone();
    let stored = store.approval(&id).await.unwrap().expect("stored");
    // The value the agent put in the header, as one quoted value, beside its name.
    assert_eq!(
        stored.request,
        format!(
            "POST {}/v1/charges/ch_1/refunds headers: x-refund-note: \"duplicate charge, customer \\\"Ann\\\" asked\" body: {{}}",
            upstream.url()
        )
    );
    let shown = sallyport_core::consent::escape(&stored.request).into_owned();
    let json = serde_json::to_string(&stored).unwrap();
    for (what, text) in [
        ("the approval's request", stored.request.as_str()),
        ("the request as shown", shown.as_str()),
        ("the stored approval", json.as_str()),
    ] {
        for form in forbidden_forms(CANARY_H) {
            assert!(!text.contains(&form), "{what} carries {form:?}: {text}");
        }
        assert!(
            !text.to_ascii_lowercase().contains("x-api-key"),
            "{what}: {text}"
        );
        assert_clean(what, text);
    }

    // Approved: the credential is attached at dispatch, in its own header.
    let decided = approval::decide(
        store.as_ref(),
        &id,
        Verdict::Approve,
        &Decider::new("alice", "cli"),
        None,
    )
    .await
    .unwrap();
    assert_eq!(decided.approval().state, ApprovalState::Approved);
    let result = executor
        .resume_approval(&id)
        .await
        .unwrap()
        .expect("carried out here");
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(upstream.requests(), 1);
    let sent = &upstream.received()[0];
    assert_eq!(sent.header("x-api-key"), Some(CANARY_H));
    assert_eq!(sent.header("x-refund-note"), Some(note));

    let finished = store.approval(&id).await.unwrap().expect("stored");
    assert_eq!(finished.state, ApprovalState::Finished);
    let json = serde_json::to_string(&finished).unwrap();
    let mut everything = vec![("the finished approval", json)];
    for record in journal.records().await.unwrap() {
        everything.push(("an audit record", serde_json::to_string(&record).unwrap()));
    }
    let mut export = Vec::new();
    export_json_lines(journal.as_ref(), &mut export)
        .await
        .unwrap();
    everything.push(("the audit export", String::from_utf8(export).unwrap()));
    everything.push(("the results", format!("{parked:?} {result:?}")));
    everything.push((
        "the tracing output",
        String::from_utf8(log_buffer().lock().unwrap().clone()).unwrap(),
    ));
    for (what, text) in &everything {
        for form in forbidden_forms(CANARY_H) {
            assert!(!text.contains(&form), "{what} carries {form:?}");
        }
    }
    for file in ["journal.db", "journal.db-wal"] {
        let bytes = std::fs::read(dir.path().join(file)).unwrap_or_default();
        for form in forbidden_forms(CANARY_H) {
            assert!(
                !bytes.windows(form.len()).any(|w| w == form.as_bytes()),
                "{file} holds {form:?}"
            );
        }
    }
}

/// The OAuth canaries: a client secret, a refresh token and the access tokens the token
/// endpoint issues, each with characters encoders change (and valid in a header).
const CANARY_CLIENT: &str = "cs-Cnry/3+E=qq.client";
const CANARY_REFRESH: &str = "rt-Cnry/5+W=yy.refresh";
const CANARY_ACCESS: [&str; 2] = ["at-Cnry/8+Q=zz.one", "at-Cnry/9+R=ww.two"];

/// Read one report with an OAuth access token (sent by the real HTTP channel).
#[derive(sallyport_core::Action, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[action(name = "get_oauth_report", effect = observe, credential = "oauth-api", consent = per_call)]
#[http(get = "/v1/reports/{report_id}", result = Report)]
struct GetOAuthReport {
    report_id: String,
}

#[tokio::test]
async fn oauth_tokens_and_the_client_secret_echoed_by_a_real_upstream_leak_nothing() {
    use sallyport_core::target::Target;
    use sallyport_core::vault::{GrantKey, GrantUpdate, OAuthClient, Vault};
    use sallyport_tests::http_server::{Reply, Upstream};
    log_buffer();
    // The token endpoint issues the two access tokens in turn (no new refresh token).
    let issued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let token = Upstream::start(move |_| {
        let i = issued.fetch_add(1, Ordering::SeqCst).min(1);
        Reply::Json(
            200,
            serde_json::json!({"access_token": CANARY_ACCESS[i], "token_type": "Bearer", "expires_in": 60}),
        )
    })
    .await;
    // The API refuses the first token with a 401 echoing it, then echoes the second in
    // every encoding, with the refresh token and client secret for good measure.
    let upstream = Upstream::start(|r| {
        let bearer = r
            .header("authorization")
            .unwrap_or_default()
            .trim_start_matches("Bearer ")
            .to_owned();
        if r.n == 1 {
            Reply::Json(
                401,
                serde_json::json!({"message": format!("token {bearer} expired")}),
            )
        } else {
            let echo: Vec<String> = full_encodings(&bearer)
                .into_iter()
                .chain(full_encodings(CANARY_REFRESH))
                .chain(full_encodings(CANARY_CLIENT))
                .collect();
            Reply::Json(
                200,
                serde_json::json!({"id": "r1", "echo": echo, "query": ""}),
            )
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let vault =
        Arc::new(FileVault::create(dir.path().join("v.spv"), PASSPHRASE, fast_kdf()).unwrap());
    vault
        .add(
            CredentialMeta::new(
                "oauth-api",
                CredentialKind::OAuthRefresh(OAuthClient::new(
                    "webapp",
                    format!("{}/token", token.url()),
                )),
                Binding::url(upstream.url()),
            ),
            Secret::new(CANARY_CLIENT),
        )
        .unwrap();
    vault
        .grants()
        .unwrap()
        .replace(
            &GrantKey::shared("oauth-api"),
            0,
            GrantUpdate::Connected {
                refresh_token: Secret::new(CANARY_REFRESH),
            },
        )
        .await
        .unwrap();
    let journal_path = dir.path().join("journal.db");
    let journal = Arc::new(SqliteJournal::open(&journal_path).unwrap());
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&prompts);
    let catalog = Catalog::builder()
        .action_with_spec::<GetOAuthReport>(|mut spec| {
            if let Target::Http(t) = &mut spec.target {
                t.message_field = Some("/message".into());
            }
            spec
        })
        .build()
        .unwrap();
    let executor = Executor::builder(catalog)
        .journal_arc(journal.clone())
        .vault_arc(vault.clone())
        .channel(sallyport_http::HttpChannel::builder().build().unwrap())
        .consent(FnConsent::new(move |request| {
            seen.lock().unwrap().push(request.render());
            async { ConsentDecision::Approve }
        }))
        .build()
        .unwrap();
    let session = Session::new("canary-oauth");
    let result = executor
        .call(
            "get_oauth_report",
            serde_json::json!({"report_id": "r1"}),
            &session,
        )
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(upstream.requests(), 2, "the 401 was followed by one resend");
    assert_eq!(token.requests(), 2);
    let data = result.data.clone().unwrap_or_default();
    for echoed in data["echo"].as_array().unwrap() {
        assert!(echoed.as_str().unwrap().contains("[REDACTED]"), "{echoed}");
    }
    let mut texts = vec![
        ("a result", result.to_json()),
        ("a result's Debug", format!("{result:?}")),
        ("the vault's Debug", format!("{vault:?}")),
        (
            "the grant's Debug",
            format!(
                "{:?}",
                vault
                    .grants()
                    .unwrap()
                    .current(&GrantKey::shared("oauth-api"))
                    .await
            ),
        ),
        (
            "the credential's Debug",
            format!("{:?}", vault.resolve("oauth-api").await),
        ),
    ];
    for record in journal.records().await.unwrap() {
        texts.push(("an audit record", serde_json::to_string(&record).unwrap()));
    }
    for prompt in prompts.lock().unwrap().iter() {
        texts.push(("a consent prompt", prompt.clone()));
    }
    texts.push((
        "the tracing output",
        String::from_utf8(log_buffer().lock().unwrap().clone()).unwrap(),
    ));
    for file in ["journal.db", "journal.db-wal", "v.spv"] {
        let bytes = std::fs::read(dir.path().join(file)).unwrap_or_default();
        texts.push(("a file", String::from_utf8_lossy(&bytes).into_owned()));
    }
    for (what, text) in &texts {
        for secret in [
            CANARY_CLIENT,
            CANARY_REFRESH,
            CANARY_ACCESS[0],
            CANARY_ACCESS[1],
        ] {
            for form in forbidden_forms(secret) {
                assert!(
                    !text.contains(&form),
                    "{what} carries a canary form {form:?}:\n{text}"
                );
            }
        }
    }
}
