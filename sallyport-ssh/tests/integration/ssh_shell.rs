//! What the remote side does with an argument, against a real OpenSSH sshd: a login shell
//! that is not POSIX (fish) is detected once per connection and refused before any command
//! runs, and a value beginning with `-` never becomes an option by accident.

use sallyport_core::action::ConsentRule;
use sallyport_core::code::{RefusalCode, UpstreamCode};
use sallyport_core::journal::AuditEvent;
use sallyport_core::outcome::{ActionResult, Origin};
use sallyport_core::target::{SshTarget, Target};
use sallyport_core::{Action, ActionSpec, Catalog, EffectClass, Session, Status};
use sallyport_ssh::SshChannel;
use sallyport_tests::sshd::fixture::{
    self, FISH_CREDENTIAL, FISH_HOST, Harness, KEY_CREDENTIAL, KEY_HOST,
};
use sallyport_tests::sshd::{FISH_USER, Sshd, fish_user};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Print one value back, framed, as the fish user.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the channel reads the field from the JSON arguments"
)]
struct FishEcho {
    value: String,
}

impl Action for FishEcho {
    const NAME: &'static str = "fish_echo";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("fish_echo", EffectClass::ReversibleChange)
            .with_description("Print one value back, framed, as the fish user.")
            .with_consent(ConsentRule::PerCall)
            .with_credential(FISH_CREDENTIAL)
            .with_target(Target::Ssh(SshTarget::new(
                FISH_HOST,
                ["printf", "<%s>", "{value}"],
            )))
    }
}

/// Print one value back, framed, as root (bash).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the channel reads the field from the JSON arguments"
)]
struct RootEcho {
    value: String,
}

impl Action for RootEcho {
    const NAME: &'static str = "root_echo";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("root_echo", EffectClass::Observe)
            .with_description("Print one value back, framed, as root.")
            .with_credential(KEY_CREDENTIAL)
            .with_target(Target::Ssh(SshTarget::new(
                KEY_HOST,
                ["printf", "<%s>", "{value}"],
            )))
    }
}

/// Archive one file into /dev/null (the file name comes from the agent).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the channel reads the field from the JSON arguments"
)]
struct ArchiveFile {
    file: String,
}

impl Action for ArchiveFile {
    const NAME: &'static str = "archive_file";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("archive_file", EffectClass::ReversibleChange)
            .with_description("Archive one file.")
            .with_consent(ConsentRule::PerCall)
            .with_credential(KEY_CREDENTIAL)
            .with_target(Target::Ssh(SshTarget::new(
                KEY_HOST,
                ["tar", "-cf", "/dev/null", "{file}"],
            )))
    }
}

/// The same, with the file name after `--`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the channel reads the field from the JSON arguments"
)]
struct ArchiveFileAfterEnd {
    file: String,
}

impl Action for ArchiveFileAfterEnd {
    const NAME: &'static str = "archive_file_after_end";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("archive_file_after_end", EffectClass::ReversibleChange)
            .with_description("Archive one file, named after the end of options.")
            .with_consent(ConsentRule::PerCall)
            .with_credential(KEY_CREDENTIAL)
            .with_target(Target::Ssh(SshTarget::new(
                KEY_HOST,
                ["tar", "-cf", "/dev/null", "--", "{file}"],
            )))
    }
}

/// Print one flag back, framed; the flag may begin with `-`.
#[derive(sallyport_core::Action, Deserialize, JsonSchema)]
#[action(
    name = "echo_flag",
    effect = observe,
    consent = per_call,
    credential = "web1-root-key"
)]
#[ssh(host = "web1", argv = ["printf", "<%s>", "{flag}"])]
#[serde(deny_unknown_fields)]
struct EchoFlag {
    #[ssh(allow_leading_dash)]
    flag: String,
}

fn catalog() -> Catalog {
    Catalog::builder()
        .action::<FishEcho>()
        .action::<RootEcho>()
        .action::<ArchiveFile>()
        .action::<ArchiveFileAfterEnd>()
        .action::<EchoFlag>()
        .build()
        .expect("catalog")
}

fn harness(sshd: &Sshd) -> Harness {
    fish_user();
    let vault = fixture::vault_with_key(&sshd.client_key());
    fixture::add_fish_key(&vault, &sshd.client_key());
    fixture::harness(
        catalog(),
        SshChannel::new(fixture::inventory_with_fish(sshd)),
        vault,
    )
}

async fn call(h: &Harness, action: &str, arguments: Value) -> ActionResult {
    h.executor
        .call(action, arguments, &Session::new("ssh-shell-tests"))
        .await
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

fn fish_refusal() -> String {
    format!(
        "the login shell of {FISH_USER}@{FISH_HOST} does not parse POSIX quoting (its probe \
         printed something other than a POSIX shell would); a quoted argument could run as shell \
         syntax there (fish, csh, cmd.exe and PowerShell quote differently), so nothing was run; \
         a human must give that account a POSIX login shell (sh, bash, dash, ksh, zsh)"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fish_login_shell_is_refused_before_any_command_runs_and_nothing_is_interpreted() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let marker = h.dir.path().join("fish-ran-it");
    let m = marker.display();
    // Each is one literal argument under POSIX quoting, and shell syntax under fish.
    let values = [
        format!("\\';touch {m};#"),
        format!("\\'; touch {m}; #"),
        format!("\\\\'; touch {m}; #"),
        format!("\\';touch {m} &;#"),
    ];
    for value in &values {
        let result = call(&h, "fish_echo", json!({"value": value})).await;
        assert_eq!(
            result.status,
            Status::Rejected,
            "{value:?}: {}",
            result.to_json()
        );
        assert_eq!(result.origin, Some(Origin::Executor));
        assert_eq!(
            result.code,
            Some(UpstreamCode::RemoteShellUnsupported.into())
        );
        assert_eq!(result.reason.as_deref(), Some(fish_refusal().as_str()));
        let event = last_event(&h).await;
        assert_eq!(event.dispatches, 0, "{value:?}");
    }
    assert!(!marker.exists(), "fish interpreted a quoted value");
    // One connection, one probe, and the probe was the only command the server started.
    assert_eq!(h.channel.connections_opened(), 1);
    assert_eq!(h.channel.shell_probes(), 1);
    assert_eq!(sshd.commands_started_for(FISH_USER), 1, "{}", sshd.log());
    assert_eq!(h.consent.asks(), values.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posix_login_shell_is_probed_once_per_pooled_connection() {
    let mut sshd = Sshd::start();
    let h = harness(&sshd);
    for value in ["one", "\\';id;#", "a & whoami"] {
        let result = call(&h, "root_echo", json!({"value": value})).await;
        assert_eq!(result.status, Status::Completed, "{}", result.to_json());
        assert_eq!(
            result.data.as_ref().unwrap()["stdout"],
            format!("<{value}>")
        );
    }
    assert_eq!(h.channel.connections_opened(), 1);
    assert_eq!(h.channel.shell_probes(), 1);
    // The probe and the three commands.
    assert_eq!(sshd.commands_started_for("root"), 4, "{}", sshd.log());
    sshd.restart();
    let result = call(&h, "root_echo", json!({"value": "after restart"})).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(h.channel.connections_opened(), 2);
    assert_eq!(h.channel.shell_probes(), 2);
    assert_eq!(sshd.commands_started_for("root"), 2, "{}", sshd.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posix_host_keeps_working_beside_a_refused_fish_host() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let fish = call(&h, "fish_echo", json!({"value": "x"})).await;
    assert_eq!(fish.code, Some(UpstreamCode::RemoteShellUnsupported.into()));
    let root = call(&h, "root_echo", json!({"value": "x"})).await;
    assert_eq!(root.status, Status::Completed, "{}", root.to_json());
    assert_eq!(root.data.as_ref().unwrap()["stdout"], "<x>");
    assert_eq!(h.channel.connections_opened(), 2);
    assert_eq!(h.channel.shell_probes(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_beginning_with_a_dash_is_refused_before_consent_and_nothing_runs() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let marker = h.dir.path().join("tar-ran-it");
    // One argument that GNU tar reads as an option running a program.
    let exploit = format!("--use-compress-program=touch {}", marker.display());
    let result = call(&h, "archive_file", json!({"file": exploit})).await;
    assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
    assert_eq!(result.origin, Some(Origin::Executor));
    assert_eq!(result.code, Some(RefusalCode::InvalidRequest.into()));
    assert_eq!(
        result.reason.as_deref(),
        Some(
            "field `file` begins with `-`, so `tar` could read it as an option rather than a \
             value; send a value that does not begin with `-` (the action accepts one only \
             after a `--` in its argv template, or when it allows a leading dash for this field)"
        )
    );
    let dash = call(&h, "archive_file", json!({"file": "-"})).await;
    assert_eq!(dash.code, Some(RefusalCode::InvalidRequest.into()));
    assert!(!marker.exists(), "tar ran the compress program");
    assert_eq!(h.consent.asks(), 0);
    assert_eq!(h.channel.connections_opened(), 0);
    assert_eq!(last_event(&h).await.dispatches, 0);
    assert_eq!(sshd.commands_started_for("root"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_after_a_literal_double_dash_reaches_the_program_as_an_operand() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let marker = h.dir.path().join("tar-ran-it");
    let exploit = format!("--use-compress-program=touch {}", marker.display());
    let result = call(&h, "archive_file_after_end", json!({"file": exploit})).await;
    // tar looked for a file of that name, did not find it, and exited 2.
    assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
    assert_eq!(result.code, Some(UpstreamCode::CommandFailed.into()));
    let data = result.data.as_ref().unwrap();
    assert_eq!(data["exit_status"], 2);
    assert!(
        data["stderr"].as_str().unwrap().contains(&format!(
            "{exploit}: Cannot stat: No such file or directory"
        )),
        "{data}"
    );
    assert!(!marker.exists(), "tar ran the compress program");
    assert_eq!(h.consent.asks(), 1);
    assert_eq!(last_event(&h).await.dispatches, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_that_allows_a_leading_dash_passes_it_as_one_literal_argument() {
    let sshd = Sshd::start();
    let h = harness(&sshd);
    let Target::Ssh(target) = EchoFlag::spec().target else {
        panic!("an ssh target")
    };
    assert_eq!(target.allow_leading_dash, ["flag"]);
    let result = call(&h, "echo_flag", json!({"flag": "-n"})).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(result.data.as_ref().unwrap()["stdout"], "<-n>");
    let expected = format!("web1 (root@127.0.0.1:{}): printf '<%s>' '-n'", sshd.port());
    assert_eq!(
        h.consent.requests.lock().unwrap().as_slice(),
        std::slice::from_ref(&expected)
    );
    assert_eq!(
        last_event(&h).await.request.as_deref(),
        Some(expected.as_str())
    );
}
