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

fn per_subject_kind() -> CredentialKind {
    CredentialKind::OAuthRefresh(
        OAuthClient::new("webapp", "https://login.example.com/token")
            .with_scopes(["api:read"])
            .per_subject(),
    )
}

#[tokio::test]
async fn each_subject_keeps_its_own_sealed_grant_across_a_reopen_and_another_instance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, vault) = new_vault(&dir, per_subject_kind());
    let store = vault.grants().expect("grants");
    let alice = GrantKey::for_subject("api", "alice");
    let bob = GrantKey::for_subject("api", "bob");
    // Nobody connected yet: a subject's grant is missing, and the shared one does not
    // exist for a credential held for each subject.
    assert!(matches!(
        store.current(&alice).await,
        Err(sallyport_core::vault::VaultError::NotFound(_))
    ));
    assert!(matches!(
        store.current(&GrantKey::shared("api")).await,
        Err(sallyport_core::vault::VaultError::NotFound(_))
    ));
    let a = store
        .put(
            &alice,
            issued("at-alice-canary-1", Some("rt-alice-canary-1")),
        )
        .await
        .expect("put alice");
    assert_eq!(a.version(), 1);
    // Another instance on the same file (as another process) connects bob; this one sees
    // it without being unlocked again.
    let other = FileVault::open(&path);
    other.unlock(PASSPHRASE).expect("unlock other");
    other
        .grants()
        .expect("grants")
        .put(&bob, issued("at-bob-canary-2", Some("rt-bob-canary-2")))
        .await
        .expect("put bob");
    let b = store.current(&bob).await.expect("bob seen from the file");
    assert_eq!(
        b.access_token().map(Secret::expose),
        Some("at-bob-canary-2")
    );
    let a = store.current(&alice).await.expect("alice");
    assert_eq!(
        a.access_token().map(Secret::expose),
        Some("at-alice-canary-1")
    );
    // Sealed: no token, no subject grant in plaintext on disk.
    let bytes = std::fs::read(&path).expect("read");
    let text = String::from_utf8_lossy(&bytes);
    assert!(!text.contains("canary"), "a token is in plaintext on disk");
    assert!(!text.contains("alice"), "a subject is in plaintext on disk");
    // Listed: subjects, scopes and expiry, never a value.
    let listed = store.list(Some("api")).await.expect("list");
    let subjects: Vec<_> = listed.iter().map(|g| g.subject.as_deref()).collect();
    assert_eq!(subjects, [Some("alice"), Some("bob")]);
    assert!(
        listed
            .iter()
            .all(|g| g.scopes == ["api:read"] && g.refresh_token)
    );
    assert!(listed.iter().all(|g| g.expires_at_ms.is_some()));
    let json = serde_json::to_string(&listed).expect("json");
    assert!(!json.contains("canary"), "{json}");
    // Removed: bob's grant goes, alice's stays; both survive a reopen as they are.
    store.remove(&bob).await.expect("remove bob");
    drop((vault, other));
    let reopened = FileVault::open(&path);
    reopened.unlock(PASSPHRASE).expect("unlock");
    let store = reopened.grants().expect("grants");
    assert!(matches!(
        store.current(&bob).await,
        Err(sallyport_core::vault::VaultError::NotFound(_))
    ));
    let a = store.current(&alice).await.expect("alice after reopen");
    assert_eq!(a.version(), 1);
    assert_eq!(
        a.refresh_token().map(Secret::expose),
        Some("rt-alice-canary-1")
    );
    // The scrubber knows every subject's tokens, and the removed ones.
    let scrubbed = reopened.scrubber();
    assert!(scrubbed.covers("at-alice-canary-1"));
}

#[tokio::test]
async fn a_subject_grant_is_replaced_by_compare_and_set_and_a_reconnect_mark_stays_with_its_subject()
 {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_path, vault) = new_vault(&dir, per_subject_kind());
    let store = vault.grants().expect("grants");
    let alice = GrantKey::for_subject("api", "alice");
    let bob = GrantKey::for_subject("api", "bob");
    for key in [&alice, &bob] {
        let stored = store
            .replace(
                key,
                0,
                GrantUpdate::Connected {
                    refresh_token: Secret::new("rt-1"),
                },
            )
            .await
            .expect("connect");
        assert!(matches!(stored, Replaced::Stored(ref g) if g.version() == 1));
    }
    // A stale version stores nothing.
    let stale = store
        .replace(&alice, 0, issued("at-x", None))
        .await
        .expect("replace");
    assert!(matches!(stale, Replaced::Changed(ref g) if g.version() == 1));
    // A refusal for alice marks only alice.
    store
        .replace(
            &alice,
            1,
            GrantUpdate::Reconnect {
                reason: "the provider answered `invalid_grant`".into(),
            },
        )
        .await
        .expect("mark");
    assert!(
        store
            .current(&alice)
            .await
            .expect("alice")
            .reconnect_reason()
            .is_some()
    );
    assert!(
        store
            .current(&bob)
            .await
            .expect("bob")
            .reconnect_reason()
            .is_none()
    );
    // The refresh holds of two subjects are taken at once (each has its own lock file;
    // with one lock per vault the second would wait for the first).
    let (_g, hold_a) = store
        .hold_refresh(&alice)
        .expect("hold")
        .expect("file vault holds");
    let (tx, rx) = std::sync::mpsc::channel();
    let bob_store = std::sync::Arc::clone(&store);
    std::thread::spawn(move || {
        let held = bob_store.hold_refresh(&bob).map(|h| h.is_some());
        let _ = tx.send(held.is_ok_and(|h| h));
    });
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)),
        Ok(true),
        "bob's refresh waited for alice's"
    );
    drop(hold_a);
}

#[test]
fn only_a_refresh_credential_is_held_for_each_subject() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v.spv");
    let vault = FileVault::create(&path, PASSPHRASE, fast_kdf()).expect("create");
    let err = vault
        .add(
            CredentialMeta::new(
                "machine",
                CredentialKind::OAuthClientCredentials(
                    OAuthClient::new("m", "https://login.example.com/token").per_subject(),
                ),
                Binding::url("https://api.example.com"),
            ),
            Secret::new("s"),
        )
        .expect_err("refused");
    assert!(
        err.to_string().contains("only an oauth_refresh credential"),
        "{err}"
    );
}

#[tokio::test]
async fn the_scopes_granted_survive_a_reopen_and_are_listed_instead_of_the_configured_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, vault) = new_vault(&dir, refresh_kind());
    let store = vault.grants().expect("grants");
    // A grant stored without scopes (as every grant before them) lists the configured ones.
    stored(
        store.as_ref(),
        0,
        GrantUpdate::Connected {
            refresh_token: Secret::new("rt-canary-1"),
        },
    )
    .await;
    let listed = store.list(None).await.expect("list");
    assert_eq!(listed[0].scopes, ["api:read"]);
    let now = SystemTime::now();
    stored(
        store.as_ref(),
        1,
        GrantUpdate::Authorized {
            refresh_token: Secret::new("rt-canary-2"),
            access_token: Secret::new("at-canary-2"),
            issued_at: now,
            expires_at: now + Duration::from_secs(60),
            scopes: vec!["api:read".into(), "api:write".into()],
        },
    )
    .await;
    drop(vault);
    let reopened = FileVault::open(&path);
    reopened.unlock(PASSPHRASE).expect("unlock");
    let store = reopened.grants().expect("grants");
    let grant = store
        .current(&GrantKey::shared("api"))
        .await
        .expect("current");
    assert_eq!(grant.version(), 2);
    assert_eq!(
        grant.scopes(),
        Some(&["api:read".to_owned(), "api:write".to_owned()][..])
    );
    assert_eq!(
        grant.access_token().map(Secret::expose),
        Some("at-canary-2")
    );
    let listed = store.list(None).await.expect("list");
    assert_eq!(listed[0].scopes, ["api:read", "api:write"]);
    assert!(listed[0].expires_at_ms.is_some());
    // A refresh keeps them.
    stored(store.as_ref(), 2, issued("at-canary-3", None)).await;
    let listed = store.list(None).await.expect("list");
    assert_eq!(listed[0].scopes, ["api:read", "api:write"]);
}
