//! A secret cut in half by the SSH channel's limits (issue 12, item 3): the stdout cap and the
//! stderr tail shown in a rejection's reason. Against the real OpenSSH sshd on loopback and a
//! real SQLite journal; the secret is another credential of the vault the command prints.

use sallyport_core::action::ConsentRule;
use sallyport_core::code::UpstreamCode;
use sallyport_core::target::{SshTarget, Target};
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, Secret};
use sallyport_core::{Action, ActionSpec, Catalog, EffectClass, Session, Status};
use sallyport_ssh::SshChannel;
use sallyport_tests::sshd::Sshd;
use sallyport_tests::sshd::fixture::{self, Harness, KEY_CREDENTIAL, KEY_HOST};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// A token with every character an URL encoder treats differently.
const TOKEN: &str = "sk-live/Ab+12=x.y_z~Q";

/// Print one value back, framed, with stdout capped at 12 bytes.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the channel reads the field from the JSON arguments"
)]
struct EchoCapped {
    value: String,
}

impl Action for EchoCapped {
    const NAME: &'static str = "echo_capped";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("echo_capped", EffectClass::Observe)
            .with_description("Print one value back, framed.")
            .with_consent(ConsentRule::None)
            .with_credential(KEY_CREDENTIAL)
            .with_target(Target::Ssh(
                SshTarget::new(KEY_HOST, ["printf", "<%s>", "{value}"]).with_output_cap(12),
            ))
    }
}

/// Write a value and a padding to stderr, then fail.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the channel reads the field from the JSON arguments"
)]
struct FailLoudly {
    value: String,
    pad: String,
}

impl Action for FailLoudly {
    const NAME: &'static str = "fail_loudly";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("fail_loudly", EffectClass::ReversibleChange)
            .with_description("Write to stderr and fail.")
            .with_consent(ConsentRule::None)
            .with_credential(KEY_CREDENTIAL)
            .with_target(Target::Ssh(SshTarget::new(
                KEY_HOST,
                [
                    "sh",
                    "-c",
                    "printf '%s %s' \"$1\" \"$2\" >&2; exit 1",
                    "sh",
                    "{value}",
                    "{pad}",
                ],
            )))
    }
}

fn harness(sshd: &Sshd) -> Harness {
    let catalog = Catalog::builder()
        .action::<EchoCapped>()
        .action::<FailLoudly>()
        .build()
        .unwrap();
    let vault = fixture::vault_with_key(&sshd.client_key());
    // Another credential of the vault: the value the command leaks.
    vault.set(
        CredentialMeta::new(
            "reports-api",
            CredentialKind::Bearer,
            Binding::url("https://reports.example.com"),
        ),
        Secret::new(TOKEN),
    );
    fixture::harness(catalog, SshChannel::new(fixture::inventory(sshd)), vault)
}

fn assert_no_piece(what: &str, text: &str) {
    for start in 0..=TOKEN.len() - 8 {
        let piece = &TOKEN[start..start + 8];
        assert!(!text.contains(piece), "{what} carries {piece:?}:\n{text}");
    }
}

async fn journal_text(h: &Harness) -> String {
    let records = h.executor.journal().records().await.unwrap();
    serde_json::to_string(&records).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_cut_by_the_stdout_cap_leaves_no_piece_in_the_result() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let session = Session::new("s1");
    let r = h
        .executor
        .call("echo_capped", json!({"value": TOKEN}), &session)
        .await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    let data = r.data.clone().unwrap();
    // The cap kept `<` and 11 bytes of the token: those are redacted.
    assert_eq!(data["stdout"], "<[REDACTED]");
    assert_eq!(data["stdout_bytes"], 23);
    assert_eq!(data["stdout_truncated"], true);
    assert_no_piece("the result", &r.to_json());
    assert_no_piece("the journal", &journal_text(&h).await);
    assert_eq!(sshd.accepted_logins(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_cut_by_the_stderr_tail_leaves_no_piece_in_the_reason() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let session = Session::new("s1");
    // 21 + 1 + 289 = 311 characters: the 300-character tail starts 11 bytes into the token.
    let pad = "d".repeat(289);
    let r = h
        .executor
        .call("fail_loudly", json!({"value": TOKEN, "pad": pad}), &session)
        .await;
    assert_eq!(r.status, Status::Rejected, "{}", r.to_json());
    assert_eq!(r.code, Some(UpstreamCode::CommandFailed.into()));
    assert_eq!(
        r.reason.as_deref(),
        Some(format!("`sh` exited with status 1: [REDACTED] {pad}").as_str())
    );
    assert_no_piece("the result", &r.to_json());
    assert_no_piece("the journal", &journal_text(&h).await);
}
