//! SSH user certificates: a credential of kind `ssh_certificate_authority` holds an OpenSSH
//! CA key; for each connection the channel signs a short-lived certificate for a fresh key,
//! valid for the inventory host's user only, against a real OpenSSH sshd that trusts the CA
//! (`TrustedUserCAKeys`) and reads each user's allowed principals from a file
//! (`AuthorizedPrincipalsFile`).
//!
//! The right CA and principal complete; a CA the server does not trust, a principal it does
//! not allow for the user, or a certificate already expired are refused by sshd and become
//! `rejected`/`auth_failed` with nothing run; the CA key appears in no result, audit record
//! or `Debug` output, even when a remote command prints it.

use std::time::{Duration, SystemTime};

use sallyport_core::code::{RefusalCode, UpstreamCode};
use sallyport_core::outcome::{ActionResult, Origin};
use sallyport_core::target::{SshTarget, Target};
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, MemoryVault, Secret, SshCertificateAuthority,
    Vault as _,
};
use sallyport_core::{Action, ActionSpec, Catalog, EffectClass, Session, Status};
use sallyport_ssh::{Host, Inventory, SshChannel, SshChannelBuilder};
use sallyport_tests::sshd::Sshd;
use sallyport_tests::sshd::fixture::{self, Harness};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

const HOST: &str = "web1";
const CA: &str = "web1-user-ca";

/// Print the remote user's name.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WhoAmI {}

impl Action for WhoAmI {
    const NAME: &'static str = "who_am_i";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("who_am_i", EffectClass::Observe)
            .with_description("Print the remote user's name.")
            .with_credential(CA)
            .with_target(Target::Ssh(SshTarget::new(HOST, ["id", "-un"])))
    }
}

/// Touch a marker file (a state change).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TouchMarker {}

impl Action for TouchMarker {
    const NAME: &'static str = "touch_marker";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("touch_marker", EffectClass::ReversibleChange)
            .with_description("Touch a marker file.")
            .with_credential(CA)
            .with_target(Target::Ssh(SshTarget::new(
                HOST,
                ["touch", "/tmp/sallyport-cert-marker"],
            )))
    }
}

/// Print one file.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the channel reads the field from the JSON arguments"
)]
struct CatFile {
    path: String,
}

impl Action for CatFile {
    const NAME: &'static str = "cat_file";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("cat_file", EffectClass::Observe)
            .with_description("Print one file.")
            .with_credential(CA)
            .with_target(Target::Ssh(SshTarget::new(HOST, ["cat", "{path}"])))
    }
}

fn catalog() -> Catalog {
    Catalog::builder()
        .action::<WhoAmI>()
        .action::<TouchMarker>()
        .action::<CatFile>()
        .build()
        .expect("catalog")
}

fn inventory(sshd: &Sshd) -> Inventory {
    Inventory::builder()
        .host(
            Host::new(HOST, "127.0.0.1", "root", CA)
                .with_port(sshd.port())
                .with_host_key(sshd.host_public_key()),
        )
        .build()
        .expect("inventory")
}

fn vault_with_ca(key: &Secret) -> MemoryVault {
    let vault = MemoryVault::new();
    vault.set(
        CredentialMeta::new(
            CA,
            CredentialKind::SshCertificateAuthority(SshCertificateAuthority::new()),
            Binding::ssh(HOST, "root"),
        ),
        key.clone(),
    );
    vault
}

fn harness_with(
    sshd: &Sshd,
    key: &Secret,
    configure: impl FnOnce(SshChannelBuilder) -> SshChannelBuilder,
) -> Harness {
    fixture::harness(
        catalog(),
        configure(SshChannel::builder(inventory(sshd))).build(),
        vault_with_ca(key),
    )
}

fn harness(sshd: &Sshd, key: &Secret) -> Harness {
    harness_with(sshd, key, |b| b)
}

async fn call(h: &Harness, action: &str, arguments: Value) -> ActionResult {
    h.executor
        .call(action, arguments, &Session::new("cert-tests"))
        .await
}

/// The forms of an OpenSSH private key that must never leak: the key, its base64 body on one
/// line, and every line of that body.
fn key_forms(key: &str) -> Vec<String> {
    let lines: Vec<&str> = key
        .lines()
        .filter(|l| !l.starts_with("-----") && !l.is_empty())
        .collect();
    let mut forms = vec![key.to_owned(), lines.concat()];
    forms.extend(lines.iter().map(|l| (*l).to_owned()));
    forms
}

fn assert_no_key(key: &str, text: &str) {
    for form in key_forms(key) {
        assert!(!text.contains(&form), "the CA key leaked: {text}");
    }
}

/// Every certificate serial the server's log shows it accepted, in order.
fn accepted_serials(sshd: &Sshd) -> Vec<String> {
    sshd.log()
        .lines()
        .filter(|l| l.contains("Accepted publickey for root") && l.contains("-CERT "))
        .filter_map(|l| {
            let start = l.find("(serial ")? + "(serial ".len();
            let end = start + l[start..].find(')')?;
            Some(l[start..end].to_owned())
        })
        .collect()
}

/// The first call is refused by sshd (which logs `sshd_says`) as `auth_failed`, nothing runs,
/// and the credential is not tried again.
async fn assert_auth_failed(h: &Harness, sshd: &Sshd, sshd_says: &str) -> ActionResult {
    let first = call(h, "touch_marker", json!({})).await;
    assert_eq!(first.status, Status::Rejected, "{}", first.to_json());
    assert_eq!(first.code, Some(UpstreamCode::AuthFailed.into()));
    assert_eq!(first.origin, Some(Origin::Upstream));
    assert_eq!(
        first.reason.as_deref(),
        Some("host `web1` rejected the credential for user `root`; a human must replace it")
    );
    // sshd saw the certificate and refused it for the reason the test set up.
    let log = sshd.log();
    assert!(
        log.contains("Failed publickey for root") && log.contains("ED25519-CERT"),
        "{log}"
    );
    assert!(log.contains(sshd_says), "{log}");
    let records = h.executor.journal().records().await.expect("records");
    assert_eq!(records.last().expect("a record").event.dispatches, 0);
    assert_eq!(sshd.accepted_certificate_logins(), 0);
    assert_eq!(sshd.commands_started_for("root"), 0);
    // The credential is marked unusable: the next call is refused here, and nothing connects.
    let opened = h.channel.connections_opened();
    let second = call(h, "who_am_i", json!({})).await;
    assert_eq!(second.code, Some(RefusalCode::CredentialUnavailable.into()));
    assert_eq!(h.channel.connections_opened(), opened);
    first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_the_hosts_user_completes_and_each_connection_gets_its_own() {
    let sshd = Sshd::start_trusting_user_ca();
    let key = Secret::new(sshd.user_ca_key());
    let h = harness(&sshd, &key);
    let first = call(&h, "who_am_i", json!({})).await;
    assert_eq!(first.status, Status::Completed, "{}", first.to_json());
    assert_eq!(first.data.as_ref().unwrap()["stdout"], "root\n");
    let second = call(&h, "touch_marker", json!({})).await;
    assert_eq!(second.status, Status::Completed, "{}", second.to_json());
    // Both calls on one pooled connection, authenticated once with a certificate.
    assert_eq!(h.channel.connections_opened(), 1);
    assert_eq!(sshd.accepted_certificate_logins(), 1);
    assert_eq!(sshd.accepted_logins(), 1);
    let log = sshd.log();
    assert!(
        log.contains("ED25519-CERT") && log.contains("ID sallyport web1-user-ca for root@web1"),
        "{log}"
    );
    // A new connection signs a new certificate (another serial, another key).
    h.channel.close_idle();
    let third = call(&h, "who_am_i", json!({})).await;
    assert_eq!(third.status, Status::Completed, "{}", third.to_json());
    assert_eq!(h.channel.connections_opened(), 2);
    let serials = accepted_serials(&sshd);
    assert_eq!(serials.len(), 2, "{}", sshd.log());
    assert_ne!(serials[0], serials[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passphrase_protected_ca_key_signs_with_its_passphrase() {
    let sshd = Sshd::start_trusting_user_ca();
    let passphrase = "ca-passphrase-canary-41c9";
    let encrypted = sshd.user_ca_key_with_passphrase(passphrase);
    let h = harness(&sshd, &Secret::new(&encrypted).with_passphrase(passphrase));
    let r = call(&h, "who_am_i", json!({})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(sshd.accepted_certificate_logins(), 1);

    // Without the passphrase the key cannot sign: refused here, nothing connects.
    let h = harness(&sshd, &Secret::new(&encrypted));
    let r = call(&h, "who_am_i", json!({})).await;
    assert_eq!(r.status, Status::Rejected);
    assert_eq!(r.code, Some(UpstreamCode::CredentialUnusable.into()));
    assert_eq!(
        r.reason.as_deref(),
        Some(
            "credential `web1-user-ca` does not hold a usable OpenSSH CA private key (or its passphrase is wrong); nothing was run"
        )
    );
    assert_eq!(h.channel.connections_opened(), 0);
    assert!(!r.to_json().contains(passphrase));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_the_server_does_not_trust_is_auth_failed() {
    let sshd = Sshd::start_trusting_user_ca();
    let key = sshd.untrusted_user_ca_key();
    let h = harness(&sshd, &Secret::new(&key));
    // A CA it does not trust: sshd logs only the failed certificate login.
    let r = assert_auth_failed(&h, &sshd, "Failed publickey").await;
    assert_no_key(&key, &r.to_json());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_a_principal_the_server_does_not_allow_is_auth_failed() {
    let sshd = Sshd::start_trusting_user_ca();
    // root may log in only with certificates naming `ops-team`; the channel's names `root`.
    sshd.set_principals("root", &["ops-team"]);
    let h = harness(&sshd, &Secret::new(sshd.user_ca_key()));
    assert_auth_failed(
        &h,
        &sshd,
        "Certificate does not contain an authorized principal",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_auth_failed() {
    let sshd = Sshd::start_trusting_user_ca();
    // Dated two hours ago, valid for five minutes: expired when the server checks it.
    let h = harness_with(&sshd, &Secret::new(sshd.user_ca_key()), |b| {
        b.certificate_clock(|| SystemTime::now() - Duration::from_secs(7200))
    });
    assert_auth_failed(&h, &sshd, "Certificate invalid: expired").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ca_key_never_leaks_even_when_a_remote_command_prints_it() {
    let sshd = Sshd::start_trusting_user_ca();
    let key = sshd.user_ca_key();
    let h = harness(&sshd, &Secret::new(&key));
    let path = sshd.user_ca_key_path();
    let r = call(
        &h,
        "cat_file",
        json!({"path": path.to_str().expect("a UTF-8 path")}),
    )
    .await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    let stdout = r.data.as_ref().unwrap()["stdout"].as_str().unwrap();
    assert!(stdout.contains("[REDACTED]"), "{stdout}");
    // A CA key that is not a key: the refusal quotes none of it.
    let bad = "not-a-ca-key-canary-5b2e";
    let h_bad = harness(&sshd, &Secret::new(bad));
    let refused = call(&h_bad, "who_am_i", json!({})).await;
    assert_eq!(refused.code, Some(UpstreamCode::CredentialUnusable.into()));
    assert!(!refused.to_json().contains(bad));

    let records = h.executor.journal().records().await.expect("records");
    let credential = h.vault.resolve(CA).await.expect("credential");
    let texts = [
        r.to_json(),
        serde_json::to_string(&records).expect("records JSON"),
        format!("{credential:?}"),
        format!("{:?}", credential.secret()),
        format!("{:?}", h.channel),
        format!("{:?}", h.vault),
    ];
    for text in &texts {
        assert_no_key(&key, text);
    }
}
