//! The SSH channel against a real OpenSSH sshd on loopback, through the executor, with a real
//! SQLite journal.

use std::time::{Duration, Instant};

use sallyport_core::action::ConsentRule;
use sallyport_core::code::{Code, RefusalCode, UpstreamCode};
use sallyport_core::journal::AuditEvent;
use sallyport_core::outcome::{ActionResult, Origin};
use sallyport_core::target::{SshTarget, Target};
use sallyport_core::{Action, ActionSpec, Catalog, EffectClass, Session, Status};
use sallyport_ssh::{InventoryError, SshChannel};
use sallyport_tests::sshd::fixture::{
    self, Harness, KEY_CREDENTIAL, KEY_HOST, PASSWORD_CREDENTIAL, PASSWORD_HOST,
};
use sallyport_tests::sshd::{PASSWORD_USER, Sshd, password_user};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Print one value back, framed: `<value>`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the channel reads the field from the JSON arguments"
)]
struct EchoArg {
    value: String,
}

impl Action for EchoArg {
    const NAME: &'static str = "echo_arg";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("echo_arg", EffectClass::Observe)
            .with_description("Print one value back, framed.")
            .with_consent(ConsentRule::PerCall)
            .with_credential(KEY_CREDENTIAL)
            .with_target(Target::Ssh(
                // The format is fixed, so `printf` never reads the value as an option: a
                // value such as `-n` arrives as printed text.
                SshTarget::new(KEY_HOST, ["printf", "<%s>", "{value}"])
                    .with_leading_dash_allowed("value"),
            ))
    }
}

/// Exit with the given code after writing to both streams.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the channel reads the field from the JSON arguments"
)]
struct ExitWith {
    code: u32,
}

impl Action for ExitWith {
    const NAME: &'static str = "exit_with";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("exit_with", EffectClass::ReversibleChange)
            .with_description("Exit with the given code.")
            .with_consent(ConsentRule::None)
            .with_credential(KEY_CREDENTIAL)
            .with_target(Target::Ssh(
                SshTarget::new(
                    KEY_HOST,
                    [
                        "sh",
                        "-c",
                        "echo out; echo \"err $1\" >&2; exit \"$1\"",
                        "sh",
                        "{code}",
                    ],
                )
                .with_exit(3, Status::AlreadyInDesiredState)
                .with_exit(4, Status::Rejected),
            ))
    }
}

/// Sleep for a while (a state-changing command that takes time).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the channel reads the field from the JSON arguments"
)]
struct SleepFor {
    seconds: u32,
}

impl Action for SleepFor {
    const NAME: &'static str = "sleep_for";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("sleep_for", EffectClass::ReversibleChange)
            .with_description("Sleep for a while.")
            .with_consent(ConsentRule::None)
            .with_credential(KEY_CREDENTIAL)
            .with_target(Target::Ssh(
                SshTarget::new(KEY_HOST, ["sleep", "{seconds}"])
                    .with_timeout(Duration::from_millis(1500)),
            ))
    }
}

/// Print the remote user's name (password host).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WhoAmI {}

impl Action for WhoAmI {
    const NAME: &'static str = "who_am_i";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("who_am_i", EffectClass::Observe)
            .with_description("Print the remote user's name.")
            .with_credential(PASSWORD_CREDENTIAL)
            .with_target(Target::Ssh(SshTarget::new(PASSWORD_HOST, ["id", "-un"])))
    }
}

/// Report the terminal and agent the command sees.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Environment {}

impl Action for Environment {
    const NAME: &'static str = "environment";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("environment", EffectClass::Observe)
            .with_description("Report the terminal and agent the command sees.")
            .with_credential(KEY_CREDENTIAL)
            .with_target(Target::Ssh(SshTarget::new(
                KEY_HOST,
                [
                    "sh",
                    "-c",
                    // `{{` and `}}` are literal braces in an argv template.
                    "tty; echo \"agent=${{SSH_AUTH_SOCK:-none}} term=${{TERM:-none}} display=${{DISPLAY:-none}}\"",
                ],
            )))
    }
}

/// Uptime of a host the agent names.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct HostUptime {
    host: String,
}

impl Action for HostUptime {
    const NAME: &'static str = "host_uptime";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("host_uptime", EffectClass::Observe)
            .with_description("Uptime of one inventory host.")
            .with_credential(KEY_CREDENTIAL)
            .with_scope_tag("host", "host")
            .with_target(Target::Ssh(SshTarget::new(
                "{host}",
                ["cat", "/proc/uptime"],
            )))
    }

    fn scope_values(&self) -> Vec<sallyport_core::action::ScopedValue> {
        vec![sallyport_core::action::ScopedValue::new(
            "host",
            "host",
            self.host.clone(),
        )]
    }
}

fn catalog() -> Catalog {
    Catalog::builder()
        .action::<EchoArg>()
        .action::<ExitWith>()
        .action::<SleepFor>()
        .action::<WhoAmI>()
        .action::<Environment>()
        .action::<HostUptime>()
        .build()
        .expect("catalog")
}

fn session() -> Session {
    Session::new("ssh-tests").allow("host", [KEY_HOST, "web9"])
}

fn harness(sshd: &Sshd) -> Harness {
    fixture::harness(
        catalog(),
        SshChannel::new(fixture::inventory(sshd)),
        fixture::vault_with_key(&sshd.client_key()),
    )
}

async fn last_event(h: &Harness) -> AuditEvent {
    h.executor
        .journal()
        .records()
        .await
        .expect("records")
        .pop()
        .expect("one record")
        .event
}

async fn call(h: &Harness, action: &str, arguments: Value) -> ActionResult {
    h.executor.call(action, arguments, &session()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_host_key_is_accepted_and_the_command_completes() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let result = call(&h, "echo_arg", json!({"value": "hello"})).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(
        result.data,
        Some(
            json!({"exit_status": 0, "stdout": "<hello>", "stderr": "", "stdout_bytes": 7,
            "stderr_bytes": 0, "stdout_truncated": false, "stderr_truncated": false})
        )
    );
    let event = last_event(&h).await;
    let expected_request = format!(
        "web1 (root@127.0.0.1:{}): printf '<%s>' 'hello'",
        sshd.port()
    );
    assert_eq!(event.request.as_deref(), Some(expected_request.as_str()));
    assert_eq!(
        h.consent.requests.lock().unwrap().as_slice(),
        [expected_request]
    );
    assert_eq!(event.dispatches, 1);
    assert_eq!(event.upstream_status, Some(0));
    assert_eq!(sshd.accepted_logins(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sha256_fingerprint_pin_is_accepted() {
    let sshd = Sshd::start();
    let fingerprint = sallyport_ssh::HostKeyPin::parse(&sshd.host_public_key())
        .unwrap()
        .fingerprint()
        .to_string();
    assert!(fingerprint.starts_with("SHA256:"));
    let h = fixture::harness(
        catalog(),
        SshChannel::new(fixture::inventory_pinned(&sshd, &fingerprint)),
        fixture::vault_with_key(&sshd.client_key()),
    );
    let result = call(&h, "echo_arg", json!({"value": "fp"})).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_host_key_is_refused_before_authentication() {
    let sshd = Sshd::start();
    let h = fixture::harness(
        catalog(),
        SshChannel::new(fixture::inventory_pinned(
            &sshd,
            &sshd.unrelated_public_key(),
        )),
        fixture::vault_with_key(&sshd.client_key()),
    );
    let result = call(&h, "echo_arg", json!({"value": "x"})).await;
    let seen = sallyport_ssh::HostKeyPin::parse(&sshd.host_public_key())
        .unwrap()
        .fingerprint();
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(result.code, Some(UpstreamCode::HostKeyMismatch.into()));
    assert_eq!(result.origin, Some(Origin::Executor));
    assert_eq!(
        result.reason.as_deref(),
        Some(
            format!(
                "host `web1` presented host key {seen}, which is not pinned in the inventory; the connection was refused before authentication"
            )
            .as_str()
        )
    );
    assert_eq!(last_event(&h).await.dispatches, 0);
    // The server never saw an authentication attempt.
    assert_eq!(sshd.accepted_logins(), 0);
    assert!(!sshd.log().contains("publickey"), "{}", sshd.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_host_key_is_refused_before_authentication() {
    let mut sshd = Sshd::start();
    let h = harness(&sshd);
    let first = call(&h, "echo_arg", json!({"value": "before"})).await;
    assert_eq!(first.status, Status::Completed, "{}", first.to_json());
    sshd.rotate_host_key();
    let second = call(&h, "echo_arg", json!({"value": "after"})).await;
    assert_eq!(second.status, Status::Rejected);
    assert_eq!(second.code, Some(UpstreamCode::HostKeyMismatch.into()));
    assert_eq!(last_event(&h).await.dispatches, 0);
    assert_eq!(sshd.accepted_logins(), 0);
    assert!(!sshd.log().contains("publickey"), "{}", sshd.log());
}

#[test]
fn corrupt_known_hosts_data_refuses_the_whole_inventory() {
    let sshd = Sshd::start();
    let line = format!("[127.0.0.1]:{} {}", sshd.port(), sshd.host_public_key());
    let truncated = &line[..line.len() - 30];
    let err = sallyport_ssh::Inventory::builder()
        .host(
            sallyport_ssh::Host::new("web1", "127.0.0.1", "root", "k")
                .with_port(sshd.port())
                .with_host_key(truncated),
        )
        .build()
        .unwrap_err();
    assert!(matches!(err, InventoryError::MalformedHostKey { .. }));
    assert_eq!(
        err.to_string(),
        "host `web1` has a malformed host key pin: the `ssh-ed25519` key data is not valid"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_authentication_runs_the_command_as_the_bound_user() {
    let password = password_user();
    let sshd = Sshd::start();
    let vault = fixture::vault_with_key(&sshd.client_key());
    fixture::add_password(&vault, password);
    let h = fixture::harness(catalog(), SshChannel::new(fixture::inventory(&sshd)), vault);
    let result = call(&h, "who_am_i", json!({})).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(
        result.data.as_ref().unwrap()["stdout"],
        format!("{PASSWORD_USER}\n")
    );
    assert_eq!(sshd.log().matches("Accepted password for").count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_auth_failed_and_the_credential_is_not_tried_again() {
    let _ = password_user();
    let sshd = Sshd::start();
    let vault = fixture::vault_with_key(&sshd.client_key());
    let wrong = "wrong-password-canary-7f3a";
    fixture::add_password(&vault, wrong);
    let h = fixture::harness(catalog(), SshChannel::new(fixture::inventory(&sshd)), vault);
    let first = call(&h, "who_am_i", json!({})).await;
    assert_eq!(first.status, Status::Rejected);
    assert_eq!(first.code, Some(UpstreamCode::AuthFailed.into()));
    assert_eq!(first.origin, Some(Origin::Upstream));
    assert_eq!(
        first.reason.as_deref(),
        Some(
            "host `web1-pw` rejected the credential for user `sallyport-sshtest`; a human must replace it"
        )
    );
    let second = call(&h, "who_am_i", json!({})).await;
    assert_eq!(second.code, Some(RefusalCode::CredentialUnavailable.into()));
    assert_eq!(sshd.log().matches("Failed password for").count(), 1);
    // The password appears nowhere the agent or the auditor can read.
    let records = h.executor.journal().records().await.unwrap();
    let audit = serde_json::to_string(&records).unwrap();
    for text in [first.to_json(), second.to_json(), audit] {
        assert!(!text.contains(wrong), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthorized_key_is_auth_failed() {
    let sshd = Sshd::start();
    let h = fixture::harness(
        catalog(),
        SshChannel::new(fixture::inventory(&sshd)),
        fixture::vault_with_key(&sshd.unauthorized_key()),
    );
    let result = call(&h, "echo_arg", json!({"value": "x"})).await;
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(result.code, Some(UpstreamCode::AuthFailed.into()));
    assert_eq!(last_event(&h).await.dispatches, 0);
    assert_eq!(sshd.accepted_logins(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passphrase_protected_key_authenticates_with_its_passphrase() {
    let sshd = Sshd::start();
    let key = sshd.authorize_encrypted_key("correct horse");
    let vault = sallyport_core::vault::MemoryVault::new();
    vault.set(
        sallyport_core::vault::CredentialMeta::new(
            KEY_CREDENTIAL,
            sallyport_core::vault::CredentialKind::SshKey,
            sallyport_core::vault::Binding::ssh(KEY_HOST, "root"),
        ),
        sallyport_core::vault::Secret::new(key).with_passphrase("correct horse"),
    );
    let h = fixture::harness(catalog(), SshChannel::new(fixture::inventory(&sshd)), vault);
    let result = call(&h, "echo_arg", json!({"value": "x"})).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_injection_string_arrives_as_one_literal_argument() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let canary = h.dir.path().join("injected");
    let c = canary.display();
    let values = [
        format!("a; touch {c}"),
        format!("$(touch {c})"),
        format!("`touch {c}`"),
        format!("'; touch {c}; '"),
        format!("\"; touch {c}; \""),
        format!("x\ntouch {c}"),
        format!("x\r\ntouch {c}"),
        format!("a && touch {c} || touch {c}"),
        format!("| touch {c}"),
        format!("> {c}"),
        "'".to_owned(),
        "'\\''".to_owned(),
        "\\".to_owned(),
        "$HOME ${HOME} $((1+1))".to_owned(),
        "* ?".to_owned(),
        "~root".to_owned(),
        "-n".to_owned(),
        "  spaced  out  ".to_owned(),
        "tab\there".to_owned(),
        "\u{1b}[31mred".to_owned(),
        "ünïcødé ✓".to_owned(),
        String::new(),
    ];
    for value in &values {
        let result = call(&h, "echo_arg", json!({"value": value})).await;
        assert_eq!(
            result.status,
            Status::Completed,
            "{value:?}: {}",
            result.to_json()
        );
        assert_eq!(
            result.data.as_ref().unwrap()["stdout"],
            format!("<{value}>"),
            "{value:?}"
        );
    }
    assert!(!canary.exists(), "a value was interpreted by the shell");
    assert_eq!(h.consent.asks(), values.len());
    // The consent prompt shows a newline as an escape, not as a second line.
    let prompts = h.consent.requests.lock().unwrap().clone();
    assert_eq!(
        prompts[5],
        format!(
            "web1 (root@127.0.0.1:{}): printf '<%s>' $'x\\ntouch {c}'",
            sshd.port()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_character_is_refused_before_consent_and_nothing_connects() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let result = call(&h, "echo_arg", json!({"value": "a\u{0}; touch /tmp/x"})).await;
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(result.code, Some(RefusalCode::InvalidRequest.into()));
    assert_eq!(
        result.reason.as_deref(),
        Some("field `value` contains a NUL character, which a remote argument cannot carry")
    );
    assert_eq!(h.consent.asks(), 0);
    assert_eq!(h.channel.connections_opened(), 0);
    assert_eq!(last_event(&h).await.dispatches, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_without_a_pty_an_agent_x11_or_passed_environment() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let result = call(&h, "environment", json!({})).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(
        result.data.as_ref().unwrap()["stdout"],
        "not a tty\nagent=none term=none display=none\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_map_to_the_declared_statuses() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let expect = [
        (0, Status::Completed, None, None),
        (3, Status::AlreadyInDesiredState, None, None),
        (
            4,
            Status::Rejected,
            Some(UpstreamCode::CommandRejected),
            Some("`sh` exited with status 4: err 4"),
        ),
        (
            5,
            Status::Rejected,
            Some(UpstreamCode::CommandFailed),
            Some("`sh` exited with status 5: err 5"),
        ),
    ];
    for (code, status, error_code, reason) in expect {
        let result = call(&h, "exit_with", json!({"code": code})).await;
        assert_eq!(result.status, status, "{code}: {}", result.to_json());
        assert_eq!(result.code, error_code.map(Code::from), "{code}");
        assert_eq!(result.reason.as_deref(), reason, "{code}");
        let data = result.data.as_ref().unwrap();
        assert_eq!(data["exit_status"], code);
        assert_eq!(data["stdout"], "out\n");
        assert_eq!(data["stderr"], format!("err {code}\n"));
        assert_eq!(last_event(&h).await.upstream_status, Some(i64::from(code)));
    }
    assert_eq!(h.channel.connections_opened(), 1);
}

/// The same situation as `a_refused_connection_is_retried_for_a_non_idempotent_action_and_counts_zero_sends`
/// in `http_channel.rs`: the upstream cannot be reached, nothing left; both channels say
/// `connect_failed` (the rules are `sallyport_core::after_send`'s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_host_is_connect_failed_as_over_http_and_nothing_is_sent() {
    let mut sshd = Sshd::start();
    let h = harness(&sshd);
    sshd.stop();
    let result = call(&h, "exit_with", json!({"code": 0})).await;
    assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
    assert_eq!(result.origin, Some(Origin::Upstream));
    assert_eq!(result.code, Some(UpstreamCode::ConnectFailed.into()));
    let reason = result.reason.as_deref().unwrap();
    assert!(
        reason.starts_with("could not reach host `web1` ("),
        "{reason}"
    );
    assert!(
        reason.ends_with("); nothing was sent, so calling again later is safe"),
        "{reason}"
    );
    let event = last_event(&h).await;
    assert_eq!(event.code, Some(UpstreamCode::ConnectFailed.into()));
    assert_eq!(event.dispatches, 0);
    assert_eq!(h.channel.connections_opened(), 0);
}

/// The same situation as `commit_then_drop_four_ways_without_a_key_is_unknown_…` in
/// `http_channel.rs` (`Drop::Reset`): the request left and the connection was lost before
/// an answer; both channels say `connection_lost_after_send`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_killed_mid_command_is_unknown() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let executor = h.executor.clone();
    let running = tokio::spawn(async move {
        executor
            .call("sleep_for", json!({"seconds": 30}), &session())
            .await
    });
    let _sshd = tokio::task::spawn_blocking(move || {
        sshd.wait_for_process("sleep");
        sshd.kill_sessions();
        sshd
    })
    .await
    .unwrap();
    let result = running.await.unwrap();
    assert_eq!(result.status, Status::Unknown, "{}", result.to_json());
    assert_eq!(
        result.code,
        Some(UpstreamCode::ConnectionLostAfterSend.into())
    );
    assert_eq!(
        result.reason.as_deref(),
        Some(
            "the connection to `web1` was lost after `sleep` was sent and before it reported an exit status; it may or may not have taken effect; do not retry"
        )
    );
    let event = last_event(&h).await;
    assert_eq!(event.status, Status::Unknown);
    assert_eq!(event.dispatches, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_its_timeout_is_unknown_for_a_state_change() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let started = Instant::now();
    let result = call(&h, "sleep_for", json!({"seconds": 20})).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(result.status, Status::Unknown);
    assert_eq!(result.code, Some(UpstreamCode::TimeoutAfterSend.into()));
    assert_eq!(
        result.reason.as_deref(),
        Some(
            "`sleep` did not finish within 1500 ms and may still be running (a remote command cannot be reliably cancelled); it may or may not have taken effect; do not retry"
        )
    );
    drop(sshd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_pooled_and_replaced_after_the_server_restarts() {
    let mut sshd = Sshd::start();
    let h = harness(&sshd);
    for value in ["one", "two", "three"] {
        let result = call(&h, "echo_arg", json!({"value": value})).await;
        assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    }
    assert_eq!(h.channel.connections_opened(), 1);
    assert_eq!(sshd.accepted_logins(), 1);
    sshd.restart();
    let result = call(&h, "echo_arg", json!({"value": "four"})).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(result.data.as_ref().unwrap()["stdout"], "<four>");
    assert_eq!(h.channel.connections_opened(), 2);
    assert_eq!(sshd.accepted_logins(), 1);
    assert_eq!(last_event(&h).await.dispatches, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_outside_the_inventory_is_refused_before_consent() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let ok = call(&h, "host_uptime", json!({"host": KEY_HOST})).await;
    assert_eq!(ok.status, Status::Completed, "{}", ok.to_json());
    let missing = call(&h, "host_uptime", json!({"host": "web9"})).await;
    assert_eq!(missing.code, Some(RefusalCode::InvalidRequest.into()));
    assert_eq!(
        missing.reason.as_deref(),
        Some("host `web9` is not in the SSH inventory")
    );
    let out_of_scope = call(&h, "host_uptime", json!({"host": PASSWORD_HOST})).await;
    assert_eq!(out_of_scope.code, Some(RefusalCode::OutOfScope.into()));
    assert_eq!(h.channel.connections_opened(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_bound_to_another_host_is_refused_before_consent() {
    let sshd = Sshd::start();
    let vault = sallyport_core::vault::MemoryVault::new();
    vault.set(
        sallyport_core::vault::CredentialMeta::new(
            KEY_CREDENTIAL,
            sallyport_core::vault::CredentialKind::SshKey,
            sallyport_core::vault::Binding::ssh("web2", "root"),
        ),
        sallyport_core::vault::Secret::new(sshd.client_key()),
    );
    let h = fixture::harness(catalog(), SshChannel::new(fixture::inventory(&sshd)), vault);
    let result = call(&h, "echo_arg", json!({"value": "x"})).await;
    assert_eq!(result.code, Some(RefusalCode::CredentialUnavailable.into()));
    assert_eq!(
        result.reason.as_deref(),
        Some(
            "credential `web1-root-key` is not bound to root@web1; the channel will not attach it there"
        )
    );
    assert_eq!(h.consent.asks(), 0);
    assert_eq!(h.channel.connections_opened(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_after_the_command_started_is_recorded_unknown() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let executor = h.executor.clone();
    let running = tokio::spawn(async move {
        executor
            .call("sleep_for", json!({"seconds": 30}), &session())
            .await
    });
    let sshd = tokio::task::spawn_blocking(move || {
        sshd.wait_for_process("sleep");
        sshd
    })
    .await
    .unwrap();
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    let deadline = Instant::now() + Duration::from_secs(5);
    let event = loop {
        let records = h.executor.journal().records().await.unwrap();
        if let Some(record) = records.into_iter().last() {
            break record.event;
        }
        assert!(
            Instant::now() < deadline,
            "no audit record for the cancelled call"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(event.status, Status::Unknown);
    assert_eq!(event.code, Some(UpstreamCode::CancelledAfterSend.into()));
    assert_eq!(event.dispatches, 1);
    drop(sshd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_output_cap_keeps_only_that_many_bytes_and_says_so() {
    let sshd = Sshd::start();
    let catalog = Catalog::builder()
        .action_with_spec::<EchoArg>(|mut spec| {
            spec.name = "echo_capped".into();
            spec.with_consent(ConsentRule::None)
                .with_target(Target::Ssh(
                    SshTarget::new(KEY_HOST, ["printf", "<%s>", "{value}"]).with_output_cap(5),
                ))
        })
        .build()
        .unwrap();
    let h = fixture::harness(
        catalog,
        SshChannel::new(fixture::inventory(&sshd)),
        fixture::vault_with_key(&sshd.client_key()),
    );
    let result = call(&h, "echo_capped", json!({"value": "hello world"})).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    let data = result.data.unwrap();
    assert_eq!(data["stdout"], "<hell");
    assert_eq!(data["stdout_bytes"], 13);
    assert_eq!(data["stdout_truncated"], true);
}
