//! The two certificate kinds in the encrypted file vault: a `client_certificate` (PEM key as
//! the value, PEM chain in the configuration) and an `ssh_certificate_authority` (OpenSSH CA
//! key and passphrase as the value, the certificate validity in the configuration) round-trip
//! through a fresh instance, nothing of either key is on disk in the clear, the vault's
//! scrubber knows the keys line by line, and a configuration the kinds do not allow is
//! refused when stored.

use sallyport_core::scrub::REDACTED;
use sallyport_core::vault::{
    Binding, ClientCertificate, CredentialKind, CredentialMeta, FileVault, Secret,
    SshCertificateAuthority, Vault, VaultAdmin, VaultError,
};
use sallyport_tests::vault_rig::{PASSPHRASE, fast_kdf};

/// A certificate chain (its content does not matter to the vault; the HTTP channel parses it).
const CHAIN: &str = "-----BEGIN CERTIFICATE-----\nMIIBcertificatechainbodyAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n-----END CERTIFICATE-----\n";
/// A PKCS#8 key's shape: two long base64 lines.
const TLS_KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgCANARYtlskeyline1x\nQUFBQUFBQUFCQUNBUllUTFNLRVlMSU5FMlNFQ1JFVFNFQ1JFVFNFQ1JFVAo=\n-----END PRIVATE KEY-----\n";
/// An OpenSSH key's shape.
const CA_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAACmFlczI1Ni1jdHIAAAAGYmNyeXB0AAAAGAAAABCANARYca1\nQ0FOQVJZQ0FLRVlTRUNPTkRMSU5FT0ZUSEVPUEVOU1NIS0VZYm9keQo=\n-----END OPENSSH PRIVATE KEY-----\n";
const CA_PASSPHRASE: &str = "ca-passphrase-canary-9d1f";

fn client_certificate() -> CredentialMeta {
    CredentialMeta::new(
        "mtls-api",
        CredentialKind::ClientCertificate(ClientCertificate::new(CHAIN)),
        Binding::url("https://mtls.example.com/v1"),
    )
}

fn certificate_authority(validity_secs: u32) -> CredentialMeta {
    CredentialMeta::new(
        "web-user-ca",
        CredentialKind::SshCertificateAuthority(
            SshCertificateAuthority::new().with_validity_secs(validity_secs),
        ),
        Binding::ssh("web1", "deploy"),
    )
}

/// Every base64 line of a PEM body.
fn body_lines(pem: &str) -> Vec<&str> {
    pem.lines().filter(|l| !l.starts_with("-----")).collect()
}

#[tokio::test]
async fn both_certificate_kinds_round_trip_and_nothing_of_their_keys_is_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vault.spv");
    let vault = FileVault::create(&path, PASSPHRASE, fast_kdf()).unwrap();
    vault
        .add(client_certificate(), Secret::new(TLS_KEY))
        .unwrap();
    vault
        .add(
            certificate_authority(120),
            Secret::new(CA_KEY).with_passphrase(CA_PASSPHRASE),
        )
        .unwrap();
    drop(vault);

    let on_disk = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
    for line in body_lines(TLS_KEY)
        .into_iter()
        .chain(body_lines(CA_KEY))
        .chain(body_lines(CHAIN))
        .chain([CA_PASSPHRASE])
    {
        assert!(!on_disk.contains(line), "`{line}` is on disk in the clear");
    }

    let reopened = FileVault::open(&path);
    reopened.unlock(PASSPHRASE).unwrap();
    assert_eq!(
        reopened.list().unwrap(),
        [client_certificate(), certificate_authority(120)]
    );
    let cert = reopened.resolve("mtls-api").await.unwrap();
    assert_eq!(cert.meta(), &client_certificate());
    assert_eq!(cert.secret().expose(), TLS_KEY);
    let ca = reopened.resolve("web-user-ca").await.unwrap();
    assert_eq!(ca.meta(), &certificate_authority(120));
    assert_eq!(ca.secret().expose(), CA_KEY);
    assert_eq!(ca.secret().expose_passphrase(), Some(CA_PASSPHRASE));

    // The scrubber knows each key whole and line by line, and the CA key's passphrase.
    let scrubber = reopened.scrubber();
    for secret in [TLS_KEY, CA_KEY, CA_PASSPHRASE]
        .into_iter()
        .chain(body_lines(TLS_KEY))
        .chain(body_lines(CA_KEY))
    {
        assert_eq!(scrubber.scrub(secret), REDACTED, "{secret}");
    }
    let joined = body_lines(TLS_KEY).concat();
    assert!(!scrubber.scrub(&joined).contains(body_lines(TLS_KEY)[0]));
    // Debug prints neither key.
    for text in [
        format!("{cert:?}"),
        format!("{ca:?}"),
        format!("{reopened:?}"),
    ] {
        for line in body_lines(TLS_KEY).into_iter().chain(body_lines(CA_KEY)) {
            assert!(!text.contains(line), "{text}");
        }
    }
}

#[test]
fn a_configuration_the_kinds_do_not_allow_is_refused_when_stored() {
    let dir = tempfile::tempdir().unwrap();
    let vault = FileVault::create(dir.path().join("vault.spv"), PASSPHRASE, fast_kdf()).unwrap();
    let invalid = |meta: CredentialMeta| match vault.add(meta, Secret::new("k")) {
        Err(VaultError::Invalid(reason)) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(invalid(certificate_authority(7200)).contains("validity_secs"));
    assert!(invalid(certificate_authority(5)).contains("validity_secs"));
    let mut no_chain = client_certificate();
    no_chain.kind = CredentialKind::ClientCertificate(ClientCertificate::new("not pem"));
    assert!(invalid(no_chain).contains("BEGIN CERTIFICATE"));
    let mut on_url = certificate_authority(300);
    on_url.binding = Binding::url("https://web1.example.com");
    assert!(invalid(on_url).contains("SSH credential"));
    let mut on_ssh = client_certificate();
    on_ssh.binding = Binding::ssh("web1", "deploy");
    assert!(invalid(on_ssh).contains("HTTP credential"));
    assert!(vault.list().unwrap().is_empty());
}
