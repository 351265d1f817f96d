//! The keychain vault against the real Linux keychains: the kernel keyutils session keyring and
//! the Secret Service of gnome-keyring-daemon on a private D-Bus session.
//!
//! These tests need both backends and FAIL (they do not skip) when one is missing. Run them
//! inside `tests/keychain-session.sh`, which starts a session keyring, a session bus and an
//! unlocked gnome-keyring-daemon:
//!
//! ```text
//! apt-get install -y keyutils dbus gnome-keyring
//! tests/keychain-session.sh cargo test -p sallyport-vault --test integration vault_keychain::
//! ```
#![cfg(target_os = "linux")]

use std::sync::atomic::{AtomicU32, Ordering};

use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, KeychainBackend, KeychainVault, Secret, Vault,
    VaultAdmin, VaultError, VaultState,
};
use sallyport_tests::vault_rig::bearer;

const HOW_TO_RUN: &str = "the keychain tests need real keychains: install `keyutils dbus gnome-keyring` \
    (apt-get install -y keyutils dbus gnome-keyring) and run the tests inside \
    `tests/keychain-session.sh cargo test …`, which starts `keyctl session`, `dbus-run-session` \
    and an unlocked `gnome-keyring-daemon`";

/// A vault on `backend` under a service name no other test (or earlier run) uses.
fn fresh(backend: KeychainBackend, dir: &tempfile::TempDir) -> KeychainVault {
    static N: AtomicU32 = AtomicU32::new(0);
    let service = format!(
        "sallyport-test-{}-{}-{}",
        backend.as_str(),
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    match KeychainVault::open(backend, service) {
        Ok(vault) => vault.with_lock_marker(dir.path().join("keychain.locked")),
        Err(e) => panic!(
            "{} keychain unavailable: {e}\n{HOW_TO_RUN}",
            backend.as_str()
        ),
    }
}

/// Removes what a test stored, so the persistent keyrings do not fill up.
fn cleanup(vault: &KeychainVault) {
    if let Ok(list) = vault.list() {
        for meta in list {
            let _ = vault.remove(&meta.name);
        }
    }
}

async fn round_trip_on(backend: KeychainBackend) {
    let dir = tempfile::tempdir().unwrap();
    let vault = fresh(backend, &dir);
    assert_eq!(vault.backend(), backend);
    assert_eq!(vault.state(), VaultState::Locked);
    let ssh = CredentialMeta::new(
        "bastion",
        CredentialKind::SshKey,
        Binding::ssh("bastion-1", "ops"),
    );
    vault
        .add(
            bearer("deploy-api", "https://api.example.com"),
            Secret::new("kc-token-\"1\"-ü"),
        )
        .unwrap();
    vault
        .add(
            ssh.clone(),
            Secret::new(
                "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
            )
            .with_passphrase("kc-key-pass"),
        )
        .unwrap();
    assert!(matches!(
        vault.add(
            bearer("deploy-api", "https://api.example.com"),
            Secret::new("x")
        ),
        Err(VaultError::AlreadyExists(_))
    ));

    // A second instance (as another process would) sees the index and the values.
    let other = KeychainVault::open(backend, vault.service())
        .unwrap()
        .with_lock_marker(dir.path().join("keychain.locked"));
    assert_eq!(
        other
            .list()
            .unwrap()
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>(),
        ["bastion", "deploy-api"]
    );
    assert!(matches!(
        other.resolve("deploy-api").await,
        Err(VaultError::Locked)
    ));
    other.unlock().unwrap();
    assert_eq!(other.state(), VaultState::Unlocked);
    let token = other.resolve("deploy-api").await.unwrap();
    assert_eq!(token.secret().expose(), "kc-token-\"1\"-ü");
    assert_eq!(token.meta().version, 1);
    let key = other.resolve("bastion").await.unwrap();
    assert_eq!(key.meta(), &ssh);
    assert_eq!(key.secret().expose_passphrase(), Some("kc-key-pass"));
    assert_eq!(other.scrubber().scrub("x kc-key-pass y"), "x [REDACTED] y");

    // Rotation bumps the version and is visible after a fresh unlock.
    assert_eq!(
        vault
            .rotate("deploy-api", Secret::new("kc-token-2"))
            .unwrap()
            .version,
        2
    );
    other.unlock().unwrap();
    let rotated = other.resolve("deploy-api").await.unwrap();
    assert_eq!(rotated.secret().expose(), "kc-token-2");
    assert_eq!(rotated.meta().version, 2);

    // The lock marker locks the running instance; unlock removes it.
    vault.lock_everywhere().unwrap();
    assert_eq!(other.state(), VaultState::Locked);
    assert_eq!(other.scrubber().pattern_count(), 0);
    other.unlock().unwrap();
    assert!(!other.lock_marker_present());

    vault.remove("deploy-api").unwrap();
    assert!(matches!(
        vault.remove("deploy-api"),
        Err(VaultError::NotFound(_))
    ));
    other.unlock().unwrap();
    assert!(matches!(
        other.resolve("deploy-api").await,
        Err(VaultError::NotFound(_))
    ));
    cleanup(&vault);
    assert_eq!(vault.list().unwrap(), Vec::<CredentialMeta>::new());
}

#[tokio::test]
async fn the_kernel_keyutils_keychain_round_trips_lists_rotates_and_removes() {
    round_trip_on(KeychainBackend::KeyUtils).await;
}

#[tokio::test]
async fn the_secret_service_keychain_round_trips_lists_rotates_and_removes() {
    round_trip_on(KeychainBackend::SecretService).await;
}

#[test]
fn the_test_session_offers_both_linux_keychains() {
    assert_eq!(
        std::env::var("SALLYPORT_KEYCHAIN_SESSION").as_deref(),
        Ok("1"),
        "{HOW_TO_RUN}"
    );
    let dir = tempfile::tempdir().unwrap();
    // Auto prefers the Secret Service when a session bus offers one.
    assert_eq!(
        fresh(KeychainBackend::Auto, &dir).backend(),
        KeychainBackend::SecretService
    );
}

#[test]
fn keychain_errors_name_the_backend_and_carry_no_value() {
    let dir = tempfile::tempdir().unwrap();
    let vault = fresh(KeychainBackend::KeyUtils, &dir);
    let err = vault
        .add(
            bearer("bad name", "https://a.example.com"),
            Secret::new("never-shown-value"),
        )
        .unwrap_err();
    assert!(matches!(err, VaultError::Invalid(_)));
    assert!(!err.to_string().contains("never-shown-value"));
    assert!(!format!("{err:?}").contains("never-shown-value"));
}
