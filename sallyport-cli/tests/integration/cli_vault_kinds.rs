//! `sallyport vault set` and `vault list` for the credential kinds beyond static secrets: an
//! mTLS client certificate (the chain from a file, the private key from stdin) and an SSH
//! certificate authority (its key from stdin, the certificates' validity as an option), as
//! a real process against a real vault file, with a real key pair made by `openssl` and a
//! real CA key made by `ssh-keygen`. The private keys are never printed, and never taken
//! from the command line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sallyport_core::vault::{
    CredentialKind, FileVault, SshCertificateAuthority, Vault, VaultAdmin,
};
use sallyport_tests::vault_rig::PASSPHRASE;

struct Cli {
    dir: tempfile::TempDir,
    /// Key material that must never be printed.
    secrets: Vec<String>,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The base64 body lines of a PEM or OpenSSH key: any of them printed is a leak.
fn key_lines(key: &str) -> Vec<String> {
    key.lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 16)
        .map(str::to_owned)
        .collect()
}

impl Cli {
    fn new() -> Self {
        let cli = Self {
            dir: tempfile::tempdir().expect("tempdir"),
            secrets: Vec::new(),
        };
        let out = cli.run(
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
        cli
    }

    fn vault(&self) -> PathBuf {
        self.dir.path().join("vault.spv")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
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
            .expect("run sallyport");
        // A command that fails before reading its input closes the pipe early.
        let _ = child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes());
        let out = child.wait_with_output().expect("wait");
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        for secret in &self.secrets {
            assert!(
                !all.contains(secret.as_str()),
                "key material printed: {all}"
            );
        }
        assert!(!all.contains(PASSPHRASE), "the passphrase was printed");
        out
    }

    fn open(&self) -> FileVault {
        let vault = FileVault::open(self.vault());
        vault.unlock(PASSPHRASE).expect("unlock");
        vault
    }
}

fn tool(program: &str, args: &[&str], dir: &Path) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program}: {}", text(&out.stderr));
}

/// A self-signed client certificate and its PKCS#8 key, made by openssl: (chain file, key).
fn client_certificate(cli: &mut Cli) -> (PathBuf, String) {
    tool(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "client.key",
            "-out",
            "client.pem",
            "-days",
            "1",
            "-subj",
            "/CN=sallyport-cli-test",
        ],
        cli.dir.path(),
    );
    let key = std::fs::read_to_string(cli.path("client.key")).expect("key");
    cli.secrets.extend(key_lines(&key));
    (cli.path("client.pem"), key)
}

/// An OpenSSH CA key with a passphrase, made by ssh-keygen.
fn ca_key(cli: &mut Cli, passphrase: &str) -> String {
    tool(
        "ssh-keygen",
        &[
            "-q", "-t", "ed25519", "-N", passphrase, "-C", "", "-f", "ca",
        ],
        cli.dir.path(),
    );
    let key = std::fs::read_to_string(cli.path("ca")).expect("CA key");
    cli.secrets.extend(key_lines(&key));
    cli.secrets.push(passphrase.to_owned());
    key
}

#[test]
fn a_client_certificate_is_stored_with_its_chain_from_a_file_and_its_key_from_stdin() {
    let mut cli = Cli::new();
    let (chain, key) = client_certificate(&mut cli);
    let chain_arg = chain.display().to_string();
    let out = cli.run(
        &[
            "vault",
            "set",
            "partner-mtls",
            "--kind",
            "client-certificate",
            "--certificate-chain",
            &chain_arg,
            "--bind",
            "https://partner.example.com",
        ],
        &format!("{PASSPHRASE}\n{key}"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "stored `partner-mtls` (version 1)\n");
    let vault = cli.open();
    let meta = &VaultAdmin::list(&vault).expect("list")[0];
    let CredentialKind::ClientCertificate(cert) = &meta.kind else {
        panic!("stored as {:?}", meta.kind);
    };
    assert_eq!(
        cert.certificate_chain,
        std::fs::read_to_string(&chain).expect("chain")
    );
    assert_eq!(meta.binding.urls, ["https://partner.example.com"]);
    // The key is the vault's secret: the scrubber knows it, whole and line by line.
    assert_eq!(vault.scrubber().scrub(&key), "[REDACTED]");
    let scrubbed = vault.scrubber().scrub(key.trim_end());
    for line in key_lines(&key) {
        assert!(!scrubbed.contains(&line), "{scrubbed}");
    }

    let out = cli.run(&["vault", "list"], &format!("{PASSPHRASE}\n"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    assert!(
        listed.contains("client-certificate (1 certificate)"),
        "{listed}"
    );
    assert!(!listed.contains("other"), "{listed}");
    let out = cli.run(&["vault", "list", "--json"], &format!("{PASSPHRASE}\n"));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(listed[0]["kind"], "client-certificate (1 certificate)");
    // The chain is public, but `list` shows its size only.
    assert!(!text(&out.stdout).contains("BEGIN CERTIFICATE"));
}

#[test]
fn an_ssh_certificate_authority_is_stored_with_its_validity_and_key_passphrase_from_stdin() {
    let mut cli = Cli::new();
    let key = ca_key(&mut cli, "ca-pass-canary-31");
    let out = cli.run(
        &[
            "vault",
            "set",
            "fleet-ca",
            "--kind",
            "ssh-certificate-authority",
            "--bind-ssh",
            "deploy@web-1",
            "--validity",
            "120",
            "--key-passphrase",
        ],
        &format!("{PASSPHRASE}\n{key}ca-pass-canary-31\n"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The short name works too, with the default validity.
    let out = cli.run(
        &[
            "vault",
            "set",
            "other-ca",
            "--kind",
            "ssh-ca",
            "--bind-ssh",
            "ops@db-1",
            "--key-passphrase",
        ],
        &format!("{PASSPHRASE}\n{key}ca-pass-canary-31\n"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let vault = cli.open();
    let listed = VaultAdmin::list(&vault).expect("list");
    let kinds: Vec<_> = listed.iter().map(|m| (m.name.as_str(), &m.kind)).collect();
    assert!(kinds.contains(&(
        "fleet-ca",
        &CredentialKind::SshCertificateAuthority(
            SshCertificateAuthority::new().with_validity_secs(120)
        )
    )));
    assert!(kinds.contains(&(
        "other-ca",
        &CredentialKind::SshCertificateAuthority(SshCertificateAuthority::new())
    )));
    let scrubber = vault.scrubber();
    assert_eq!(scrubber.scrub("ca-pass-canary-31"), "[REDACTED]");

    let out = cli.run(&["vault", "list"], &format!("{PASSPHRASE}\n"));
    let listed = text(&out.stdout);
    assert!(
        listed.contains("ssh-certificate-authority (certificates valid 120 s)"),
        "{listed}"
    );
    assert!(
        listed.contains("ssh-certificate-authority (certificates valid 300 s)"),
        "{listed}"
    );
    assert!(listed.contains("deploy@web-1"), "{listed}");
}

#[test]
fn the_new_kinds_refuse_bad_options_with_exit_2_and_store_nothing() {
    let mut cli = Cli::new();
    let (chain, key) = client_certificate(&mut cli);
    let chain_arg = chain.display().to_string();
    let cases: [(&[&str], &str, &str); 5] = [
        (
            &[
                "--kind",
                "client-certificate",
                "--bind",
                "https://a.example.com",
            ],
            "--certificate-chain",
            "",
        ),
        (
            &[
                "--kind",
                "bearer",
                "--certificate-chain",
                &chain_arg,
                "--bind",
                "https://a.example.com",
            ],
            "--certificate-chain is for --kind client-certificate",
            "",
        ),
        (
            &[
                "--kind",
                "bearer",
                "--validity",
                "60",
                "--bind",
                "https://a.example.com",
            ],
            "--validity is for --kind ssh-certificate-authority",
            "",
        ),
        (
            &[
                "--kind",
                "client-certificate",
                "--certificate-chain",
                &chain_arg,
                "--bind",
                "https://a.example.com",
            ],
            "does not start with a -----BEGIN line",
            "not a key\n",
        ),
        (
            &[
                "--kind",
                "client-certificate",
                "--certificate-chain",
                "/nonexistent/chain.pem",
                "--bind",
                "https://a.example.com",
            ],
            "cannot read the certificate chain /nonexistent/chain.pem",
            "",
        ),
    ];
    for (args, says, stdin) in cases {
        let mut all = vec!["vault", "set", "x"];
        all.extend_from_slice(args);
        let out = cli.run(&all, &format!("{PASSPHRASE}\n{stdin}{key}"));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // A validity outside 30..=3600 s is refused when the credential is checked.
    let ca = ca_key(&mut cli, "ca-pass-canary-32");
    let out = cli.run(
        &[
            "vault",
            "set",
            "x",
            "--kind",
            "ssh-ca",
            "--bind-ssh",
            "ops@db-1",
            "--validity",
            "10",
        ],
        &format!("{PASSPHRASE}\n{ca}"),
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("validity_secs is from 30 to 3600"),
        "{}",
        text(&out.stderr)
    );
    assert!(VaultAdmin::list(&cli.open()).expect("list").is_empty());
}
