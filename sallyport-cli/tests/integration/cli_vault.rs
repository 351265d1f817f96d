//! `sallyport vault …` as a real process: secrets from stdin only, documented exit codes and
//! messages, nothing printed that is secret, damaged files left byte-identical, concurrent
//! processes losing no record, and the lock marker reaching a running vault.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sallyport_core::vault::{FileVault, Vault, VaultAdmin, VaultState};
use sallyport_tests::vault_rig::PASSPHRASE;

const TOKEN: &str = "cli-canary-token-5e8a";

struct Cli {
    dir: tempfile::TempDir,
}

impl Cli {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn vault(&self) -> PathBuf {
        self.dir.path().join("vault.spv")
    }

    fn run(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sallyport"))
            .arg("--vault")
            .arg(self.vault())
            .args(args)
            .env_clear()
            .env("HOME", self.dir.path())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A command that fails before reading its input closes the pipe early.
        let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
        let out = child.wait_with_output().unwrap();
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!all.contains(TOKEN), "a secret was printed: {all}");
        assert!(
            !all.contains(PASSPHRASE),
            "the passphrase was printed: {all}"
        );
        out
    }

    fn init(&self) {
        let out = self.run(
            &[
                "vault",
                "init",
                "--kdf-memory-mib",
                "1",
                "--kdf-iterations",
                "1",
            ],
            &format!("{PASSPHRASE}\n"),
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            format!("created vault {}\n", self.vault().display())
        );
    }

    fn set_bearer(&self, name: &str, value: &str) -> Output {
        self.run(
            &[
                "vault",
                "set",
                name,
                "--kind",
                "bearer",
                "--bind",
                "https://api.example.com",
            ],
            &format!("{PASSPHRASE}\n{value}\n"),
        )
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

#[tokio::test]
async fn set_list_rotate_and_remove_read_secrets_from_stdin_and_never_print_them() {
    let cli = Cli::new();
    cli.init();
    let out = cli.set_bearer("deploy-api", TOKEN);
    assert_eq!(code(&out), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "stored `deploy-api` (version 1)\n");

    let again = cli.set_bearer("deploy-api", "other-value");
    assert_eq!(code(&again), Some(6));
    assert_eq!(
        text(&again.stderr),
        "sallyport: a credential named `deploy-api` already exists\n"
    );

    let basic = cli.run(
        &[
            "vault",
            "set",
            "billing",
            "--kind",
            "basic",
            "--user",
            "robot",
            "--bind",
            "https://billing.example.com",
            "--bind",
            "https://billing2.example.com",
        ],
        &format!("{PASSPHRASE}\nbilling-pass-77\n"),
    );
    assert_eq!(code(&basic), Some(0), "{}", text(&basic.stderr));

    let list = cli.run(&["vault", "list", "--json"], &format!("{PASSPHRASE}\n"));
    assert_eq!(code(&list), Some(0));
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(
        listed,
        serde_json::json!([
            {"name": "billing", "kind": "basic (user robot)", "version": 1,
             "binding": ["https://billing.example.com", "https://billing2.example.com"]},
            {"name": "deploy-api", "kind": "bearer", "version": 1,
             "binding": ["https://api.example.com"]}
        ])
    );
    assert!(!text(&list.stdout).contains("billing-pass-77"));

    let table = cli.run(&["vault", "list"], &format!("{PASSPHRASE}\n"));
    assert!(
        text(&table.stdout).starts_with("NAME "),
        "{}",
        text(&table.stdout)
    );
    assert!(text(&table.stdout).contains("deploy-api"));

    let rotate = cli.run(
        &["vault", "rotate", "deploy-api"],
        &format!("{PASSPHRASE}\n{TOKEN}-v2\n"),
    );
    assert_eq!(code(&rotate), Some(0), "{}", text(&rotate.stderr));
    assert_eq!(text(&rotate.stdout), "rotated `deploy-api` (version 2)\n");

    // The value really is in the vault.
    let vault = FileVault::open(cli.vault());
    vault.unlock(PASSPHRASE).unwrap();
    assert_eq!(
        vault.resolve("deploy-api").await.unwrap().secret().expose(),
        format!("{TOKEN}-v2")
    );
    assert_eq!(
        vault.resolve("billing").await.unwrap().secret().expose(),
        "billing-pass-77"
    );

    let remove = cli.run(&["vault", "remove", "billing"], &format!("{PASSPHRASE}\n"));
    assert_eq!(code(&remove), Some(0));
    assert_eq!(text(&remove.stdout), "removed `billing`\n");
    let missing = cli.run(&["vault", "remove", "billing"], &format!("{PASSPHRASE}\n"));
    assert_eq!(code(&missing), Some(5));
    assert_eq!(
        text(&missing.stderr),
        "sallyport: no credential named `billing`\n"
    );
}

#[test]
fn an_ssh_key_and_its_passphrase_are_read_from_stdin() {
    let cli = Cli::new();
    cli.init();
    let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\nAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ\n-----END OPENSSH PRIVATE KEY-----\n";
    let out = cli.run(
        &[
            "vault",
            "set",
            "bastion",
            "--kind",
            "ssh-key",
            "--bind-ssh",
            "ops@bastion-1",
            "--key-passphrase",
        ],
        &format!("{PASSPHRASE}\n{key}key-pass-1\n"),
    );
    assert_eq!(code(&out), Some(0), "{}", text(&out.stderr));
    let vault = FileVault::open(cli.vault());
    vault.unlock(PASSPHRASE).unwrap();
    let meta = &VaultAdmin::list(&vault).unwrap()[0];
    assert_eq!(meta.binding.ssh[0].user, "ops");
    assert_eq!(meta.binding.ssh[0].host, "bastion-1");
    let scrubber = vault.scrubber();
    assert_eq!(scrubber.scrub("key-pass-1"), "[REDACTED]");
    assert_eq!(scrubber.scrub(key), "[REDACTED]");
}

#[test]
fn a_secret_cannot_be_given_as_an_argument() {
    let cli = Cli::new();
    cli.init();
    for flag in ["--secret", "--value", "--token", "--password"] {
        let out = cli.run(
            &[
                "vault",
                "set",
                "x",
                "--kind",
                "bearer",
                "--bind",
                "https://a.example.com",
                flag,
                "abc",
            ],
            &format!("{PASSPHRASE}\nvalue-1\n"),
        );
        assert_eq!(code(&out), Some(2), "{flag}");
        assert!(
            text(&out.stderr).contains(&format!("unexpected argument '{flag}'")),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_wrong_passphrase_exits_4_and_leaves_the_file_byte_identical() {
    let cli = Cli::new();
    cli.init();
    assert_eq!(code(&cli.set_bearer("a", TOKEN)), Some(0));
    let before = std::fs::read(cli.vault()).unwrap();
    let out = cli.run(&["vault", "list"], "not-the-passphrase\n");
    assert_eq!(code(&out), Some(4));
    assert_eq!(
        text(&out.stderr),
        format!(
            "sallyport: wrong passphrase for vault {}; the file was left untouched\n",
            cli.vault().display()
        )
    );
    assert_eq!(std::fs::read(cli.vault()).unwrap(), before);
}

#[test]
fn a_missing_vault_exits_5_and_a_damaged_one_exits_7_untouched() {
    let cli = Cli::new();
    let out = cli.run(&["vault", "list"], &format!("{PASSPHRASE}\n"));
    assert_eq!(code(&out), Some(5));
    assert_eq!(
        text(&out.stderr),
        format!(
            "sallyport: no vault at {}; create one with `sallyport vault init`\n",
            cli.vault().display()
        )
    );
    cli.init();
    let mut bytes = std::fs::read(cli.vault()).unwrap();
    bytes.truncate(bytes.len() - 7);
    std::fs::write(cli.vault(), &bytes).unwrap();
    for args in [
        &["vault", "list"][..],
        &["vault", "status"][..],
        &["vault", "lock"][..],
    ] {
        let out = cli.run(args, &format!("{PASSPHRASE}\n"));
        assert_eq!(code(&out), Some(7), "{args:?}: {}", text(&out.stderr));
        assert_eq!(std::fs::read(cli.vault()).unwrap(), bytes);
    }
    let set = cli.set_bearer("a", TOKEN);
    assert_eq!(code(&set), Some(7));
    assert_eq!(std::fs::read(cli.vault()).unwrap(), bytes);
}

#[test]
fn init_refuses_an_existing_file_with_exit_6_and_leaves_it_byte_identical() {
    let cli = Cli::new();
    std::fs::write(cli.vault(), b"someone else's file").unwrap();
    let out = cli.run(&["vault", "init"], &format!("{PASSPHRASE}\n"));
    assert_eq!(code(&out), Some(6));
    assert_eq!(std::fs::read(cli.vault()).unwrap(), b"someone else's file");
}

#[test]
fn lock_reaches_a_running_vault_status_exits_3_and_unlock_clears_it() {
    let cli = Cli::new();
    cli.init();
    assert_eq!(code(&cli.set_bearer("a", TOKEN)), Some(0));
    let running = FileVault::open(cli.vault());
    running.unlock(PASSPHRASE).unwrap();
    assert_eq!(running.state(), VaultState::Unlocked);

    let status = cli.run(&["vault", "status", "--json"], "");
    assert_eq!(code(&status), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["state"], "unlocked");
    assert_eq!(json["credentials"], 1);
    assert_eq!(json["format_version"], 1);
    assert_eq!(json["kdf"]["memory_kib"], 1024);

    let lock = cli.run(&["vault", "lock"], "");
    assert_eq!(code(&lock), Some(0), "{}", text(&lock.stderr));
    assert_eq!(running.state(), VaultState::Locked);
    let status = cli.run(&["vault", "status"], "");
    assert_eq!(code(&status), Some(3));
    assert!(text(&status.stdout).contains("state:       locked"));

    let unlock = cli.run(&["vault", "unlock"], &format!("{PASSPHRASE}\n"));
    assert_eq!(code(&unlock), Some(0));
    assert_eq!(code(&cli.run(&["vault", "status"], "")), Some(0));
}

#[test]
fn concurrent_cli_processes_lose_no_record() {
    let cli = Cli::new();
    cli.init();
    let children: Vec<_> = (0..6)
        .map(|i| {
            let mut child = Command::new(env!("CARGO_BIN_EXE_sallyport"))
                .arg("--vault")
                .arg(cli.vault())
                .args([
                    "vault",
                    "set",
                    &format!("proc-{i}"),
                    "--kind",
                    "bearer",
                    "--bind",
                    "https://api.example.com",
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(format!("{PASSPHRASE}\nvalue-{i}-zzzz\n").as_bytes())
                .unwrap();
            child
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let vault = FileVault::open(cli.vault());
    vault.unlock(PASSPHRASE).unwrap();
    let names: Vec<String> = VaultAdmin::list(&vault)
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(
        names,
        (0..6).map(|i| format!("proc-{i}")).collect::<Vec<_>>()
    );
}

#[test]
fn help_lists_the_commands_and_the_exit_codes_and_bad_usage_exits_2() {
    let cli = Cli::new();
    let help = cli.run(&["--help"], "");
    assert_eq!(code(&help), Some(0));
    let help = text(&help.stdout);
    for needle in [
        "vault",
        "audit",
        "Exit codes:",
        "3  the vault is locked",
        "taken from arguments or environment variables",
    ] {
        assert!(
            help.contains(needle),
            "{needle} missing from --help:\n{help}"
        );
    }
    let vault_help = text(&cli.run(&["vault", "--help"], "").stdout);
    for cmd in [
        "init", "set", "list", "remove", "rotate", "lock", "unlock", "status",
    ] {
        assert!(
            vault_help.contains(&format!("  {cmd} ")),
            "{cmd} missing:\n{vault_help}"
        );
    }
    let bad = cli.run(&["vault", "set", "x", "--kind", "nonsense"], "");
    assert_eq!(code(&bad), Some(2));
    let unbound = cli.run(
        &["vault", "set", "x", "--kind", "bearer"],
        &format!("{PASSPHRASE}\n"),
    );
    assert_eq!(code(&unbound), Some(2));
    assert_eq!(
        text(&unbound.stderr),
        "sallyport: invalid credential: an HTTP credential is bound to one or more base URLs and no SSH host\n"
    );
}

#[test]
fn the_passphrase_file_option_reads_only_its_first_line() {
    let cli = Cli::new();
    cli.init();
    let file = cli.dir.path().join("pass.txt");
    std::fs::write(&file, format!("{PASSPHRASE}\nignored\n")).unwrap();
    let out = cli.run(
        &[
            "--passphrase-file",
            file.to_str().unwrap(),
            "vault",
            "set",
            "a",
            "--kind",
            "bearer",
            "--bind",
            "https://a.example.com",
        ],
        &format!("{TOKEN}\n"),
    );
    assert_eq!(code(&out), Some(0), "{}", text(&out.stderr));
    let _ = Path::new(&file);
}

#[test]
fn list_shows_an_oauth_credential_held_for_each_subject() {
    use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, OAuthClient, Secret};
    let cli = Cli::new();
    cli.init();
    let vault = FileVault::open(cli.vault());
    vault.unlock(PASSPHRASE).unwrap();
    vault
        .add(
            CredentialMeta::new(
                "github",
                CredentialKind::OAuthRefresh(
                    OAuthClient::new("my-app", "https://github.com/login/oauth/access_token")
                        .per_subject(),
                ),
                Binding::url("https://api.github.com"),
            ),
            Secret::new(TOKEN),
        )
        .unwrap();
    vault
        .add(
            CredentialMeta::new(
                "crm",
                CredentialKind::OAuthRefresh(OAuthClient::new(
                    "crm-app",
                    "https://login.example.com/token",
                )),
                Binding::url("https://api.example.com"),
            ),
            Secret::new(TOKEN),
        )
        .unwrap();
    let out = cli.run(&["vault", "list"], &format!("{PASSPHRASE}\n"));
    assert_eq!(code(&out), Some(0), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    assert!(
        listed.contains("oauth-refresh (client my-app, a grant per subject)"),
        "{listed}"
    );
    assert!(
        listed.contains("oauth-refresh (client crm-app)"),
        "{listed}"
    );
}
