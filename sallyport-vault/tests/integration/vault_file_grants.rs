//! OAuth grants in the encrypted file vault, on real files: sealed in the credential's own
//! record (never in plaintext on disk), kept across a reopen, replaced only by
//! compare-and-set on their version (also against another instance on the same file, as a
//! second process), known to the scrubber (old tokens too), and reset when a
//! client-credentials secret is replaced.

use std::time::{Duration, SystemTime};

use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, FileVault, Grant, GrantKey, GrantStore, GrantUpdate,
    OAuthClient, Replaced, Secret, Vault, VaultAdmin,
};
use sallyport_tests::vault_rig::{PASSPHRASE, fast_kdf};

const CLIENT_SECRET: &str = "client-secret-canary-77aa";

fn refresh_kind() -> CredentialKind {
    CredentialKind::OAuthRefresh(
        OAuthClient::new("webapp", "https://login.example.com/token").with_scopes(["api:read"]),
    )
}

fn issued(access: &str, refresh: Option<&str>) -> GrantUpdate {
    let now = SystemTime::now();
    GrantUpdate::Issued {
        access_token: Secret::new(access),
        issued_at: now,
        expires_at: now + Duration::from_secs(60),
        refresh_token: refresh.map(Secret::new),
    }
}

async fn stored(store: &dyn GrantStore, version: u64, update: GrantUpdate) -> Grant {
    match store
        .replace(&GrantKey::shared("api"), version, update)
        .await
        .expect("replace")
    {
        Replaced::Stored(g) => g,
        other => panic!("not stored: {other:?}"),
    }
}

fn new_vault(dir: &tempfile::TempDir, kind: CredentialKind) -> (std::path::PathBuf, FileVault) {
    let path = dir.path().join("vault.spv");
    let vault = FileVault::create(&path, PASSPHRASE, fast_kdf()).expect("create");
    vault
        .add(
            CredentialMeta::new("api", kind, Binding::url("https://api.example.com")),
            Secret::new(CLIENT_SECRET),
        )
        .expect("add");
    (path, vault)
}

#[tokio::test]
async fn a_rotated_grant_survives_a_reopen_and_is_never_in_plaintext_on_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, vault) = new_vault(&dir, refresh_kind());
    let store = vault.grants().expect("the file vault keeps grants");
    stored(
        store.as_ref(),
        0,
        GrantUpdate::Connected {
            refresh_token: Secret::new("rt-canary-1"),
        },
    )
    .await;
    let g = stored(
        store.as_ref(),
        1,
        issued("at-canary-1", Some("rt-canary-2")),
    )
    .await;
    assert_eq!(g.version(), 2);
    let bytes = std::fs::read(&path).expect("read");
    let text = String::from_utf8_lossy(&bytes);
    for secret in ["rt-canary-1", "rt-canary-2", "at-canary-1", CLIENT_SECRET] {
        assert!(!text.contains(secret), "{secret} in plaintext on disk");
    }
    drop(vault);
    let reopened = FileVault::open(&path);
    reopened.unlock(PASSPHRASE).expect("unlock");
    let grant = reopened
        .grants()
        .expect("grants")
        .current(&GrantKey::shared("api"))
        .await
        .expect("current");
    assert_eq!(grant.version(), 2);
    assert_eq!(
        grant.refresh_token().map(Secret::expose),
        Some("rt-canary-2")
    );
    assert_eq!(
        grant.access_token().map(Secret::expose),
        Some("at-canary-1")
    );
    assert_eq!(grant.lifetime(), Duration::from_secs(60));
    // The credential itself did not change version: calls in flight are not refused.
    assert_eq!(reopened.list().expect("list")[0].version, 1);
    // The resolved credential carries the store.
    let credential = reopened.resolve("api").await.expect("resolve");
    assert!(credential.grants().is_some());
}

#[tokio::test]
async fn a_stale_version_stores_nothing_and_returns_the_current_grant_even_from_another_instance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, first) = new_vault(&dir, refresh_kind());
    let store = first.grants().expect("grants");
    stored(
        store.as_ref(),
        0,
        GrantUpdate::Connected {
            refresh_token: Secret::new("rt-canary-1"),
        },
    )
    .await;
    // A second instance on the same file, as another process would open it.
    let second = FileVault::open(&path);
    second.unlock(PASSPHRASE).expect("unlock");
    let other = second.grants().expect("grants");
    stored(
        other.as_ref(),
        1,
        issued("at-canary-2", Some("rt-canary-2")),
    )
    .await;
    // The first instance still believes version 1; its replace reads the file under the
    // lock and finds version 2.
    let answer = store
        .replace(
            &GrantKey::shared("api"),
            1,
            issued("at-canary-3", Some("rt-canary-3")),
        )
        .await
        .expect("replace");
    let Replaced::Changed(current) = answer else {
        panic!("a stale version was stored: {answer:?}");
    };
    assert_eq!(current.version(), 2);
    assert_eq!(
        current.refresh_token().map(Secret::expose),
        Some("rt-canary-2")
    );
    let on_disk = FileVault::open(&path);
    on_disk.unlock(PASSPHRASE).expect("unlock");
    let grant = on_disk
        .grants()
        .expect("grants")
        .current(&GrantKey::shared("api"))
        .await
        .expect("current");
    assert_eq!(
        grant.refresh_token().map(Secret::expose),
        Some("rt-canary-2")
    );
}

#[tokio::test]
async fn the_scrubber_knows_the_grant_tokens_and_the_ones_they_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_path, vault) = new_vault(&dir, refresh_kind());
    let store = vault.grants().expect("grants");
    stored(
        store.as_ref(),
        0,
        GrantUpdate::Connected {
            refresh_token: Secret::new("rt-canary-1"),
        },
    )
    .await;
    stored(
        store.as_ref(),
        1,
        issued("at-canary-1", Some("rt-canary-2")),
    )
    .await;
    let text = "rt-canary-1 rt-canary-2 at-canary-1 client-secret-canary-77aa";
    let scrubbed = vault.scrubber().scrub(text).into_owned();
    for secret in ["rt-canary-1", "rt-canary-2", "at-canary-1", CLIENT_SECRET] {
        assert!(
            !scrubbed.contains(secret),
            "{secret} not scrubbed: {scrubbed}"
        );
    }
    assert!(format!("{:?}", store.current(&GrantKey::shared("api")).await).contains("version: 2"));
}

#[tokio::test]
async fn a_new_client_credentials_secret_starts_a_new_grant_and_a_refresh_grant_survives_rotation()
{
    let dir = tempfile::tempdir().expect("tempdir");
    let kind = CredentialKind::OAuthClientCredentials(OAuthClient::new(
        "machine",
        "https://login.example.com/token",
    ));
    let (_path, vault) = new_vault(&dir, kind);
    let store = vault.grants().expect("grants");
    stored(
        store.as_ref(),
        0,
        GrantUpdate::Reconnect {
            reason: "the provider answered `invalid_client`".into(),
        },
    )
    .await;
    vault
        .rotate("api", Secret::new("client-secret-canary-new"))
        .expect("rotate");
    let grant = store
        .current(&GrantKey::shared("api"))
        .await
        .expect("current");
    assert_eq!(grant.version(), 0);
    assert_eq!(grant.reconnect_reason(), None);

    let dir = tempfile::tempdir().expect("tempdir");
    let (_path, vault) = new_vault(&dir, refresh_kind());
    let store = vault.grants().expect("grants");
    stored(
        store.as_ref(),
        0,
        GrantUpdate::Connected {
            refresh_token: Secret::new("rt-canary-1"),
        },
    )
    .await;
    vault
        .rotate("api", Secret::new("client-secret-canary-new"))
        .expect("rotate");
    let grant = store
        .current(&GrantKey::shared("api"))
        .await
        .expect("current");
    assert_eq!(
        grant.refresh_token().map(Secret::expose),
        Some("rt-canary-1")
    );
}

#[test]
fn an_oauth_token_endpoint_off_loopback_must_be_https() {
    let dir = tempfile::tempdir().expect("tempdir");
    let vault =
        FileVault::create(dir.path().join("v.spv"), PASSPHRASE, fast_kdf()).expect("create");
    let add = |endpoint: &str| {
        vault.set(
            CredentialMeta::new(
                "api",
                CredentialKind::OAuthClientCredentials(OAuthClient::new("c", endpoint)),
                Binding::url("https://api.example.com"),
            ),
            Secret::new(CLIENT_SECRET),
        )
    };
    assert!(add("http://login.example.com/token").is_err());
    assert!(add("https://user@login.example.com/token").is_err());
    assert!(add("http://127.0.0.1:8080/token").is_ok());
    assert!(add("https://login.example.com/token").is_ok());
}
