//! The grant store conformance suite against the in-memory vault's store and the file
//! vault's (two instances on one file as the two handles, as two processes would open it),
//! and a file vault's holder process killed mid-hold. PostgreSQL's runs in
//! `sallyport-postgres`'s tests.

use std::io::Write as _;
use std::sync::{Arc, Mutex};

use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, FileVault, GrantKey, KdfParams, MemoryVault,
    OAuthClient, Secret, Vault, VaultAdmin, VaultError,
};
use sallyport_testkit::grant_conformance::{self as suite, GrantFixture};

fn credentials() -> [CredentialMeta; 2] {
    let endpoint = "https://login.example.com/token";
    [
        CredentialMeta::new(
            "github",
            CredentialKind::OAuthRefresh(
                OAuthClient::new("webapp", endpoint)
                    .with_scopes(["repo", "read:user"])
                    .per_subject(),
            ),
            Binding::url("https://api.example.com"),
        ),
        CredentialMeta::new(
            "service",
            CredentialKind::OAuthClientCredentials(OAuthClient::new("daemon", endpoint)),
            Binding::url("https://api.example.com"),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_vaults_grant_store_passes_the_whole_suite() {
    let mut fixtures = 0;
    suite::run_all(|| {
        fixtures += 1;
        async {
            let vault = Arc::new(MemoryVault::new());
            for meta in credentials() {
                VaultAdmin::add(&*vault, meta, Secret::new("client-secret")).expect("add");
            }
            let store = vault.grants().expect("the memory vault keeps grants");
            GrantFixture::new(Arc::clone(&store), store, "github", "service")
                .scopes(["repo", "read:user"])
                .one_process()
                .scrubber(move || vault.scrubber())
        }
    })
    .await;
    assert_eq!(fixtures, suite::CHECKS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_vaults_grant_store_passes_the_whole_suite_across_two_instances() {
    let dirs: Arc<Mutex<Vec<tempfile::TempDir>>> = Arc::new(Mutex::new(Vec::new()));
    let held = Arc::clone(&dirs);
    suite::run_all(move || {
        let held = Arc::clone(&held);
        async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("vault.spv");
            let passphrase = "conformance passphrase";
            let vault =
                FileVault::create(&path, passphrase, KdfParams::new(1024, 1, 1)).expect("create");
            for meta in credentials() {
                vault.add(meta, Secret::new("client-secret")).expect("add");
            }
            let other = FileVault::open(&path);
            other.unlock(passphrase).expect("unlock");
            held.lock().expect("dirs").push(dir);
            let vault = Arc::new(vault);
            let store = vault.grants().expect("the file vault keeps grants");
            let other = other.grants().expect("grants");
            GrantFixture::new(store, other, "github", "service")
                .scopes(["repo", "read:user"])
                .scrubber(move || vault.scrubber())
        }
    })
    .await;
    assert_eq!(dirs.lock().expect("dirs").len(), suite::CHECKS);
}

/// Where the holder process (this test binary run again) finds the vault to hold a grant of.
const HOLDER_VAULT: &str = "SALLYPORT_TESTKIT_HOLDER_VAULT";
const HOLDER_PASSPHRASE: &str = "holder passphrase";

/// A process holding a file vault grant's refresh right (this test run again as the holder:
/// it takes the hold, prints `held`, and sleeps until killed) is killed mid-hold: the
/// operating system lets its lock go, and this process's store takes the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_vault_holder_process_killed_mid_hold_lets_go() {
    let alice = GrantKey::for_subject("github", "alice");
    if let Ok(path) = std::env::var(HOLDER_VAULT) {
        // The holder's side.
        let vault = FileVault::open(&path);
        vault.unlock(HOLDER_PASSPHRASE).expect("unlock");
        let store = vault.grants().expect("grants");
        let (grant, _hold) = store
            .hold_refresh(&alice)
            .expect("hold")
            .expect("the file vault holds");
        let mut out = std::io::stdout().lock();
        // On a line of its own: libtest has written `test … ... ` without a newline.
        writeln!(out, "\nheld {}", grant.version()).expect("stdout");
        out.flush().expect("stdout");
        drop(out);
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    let (_dir, path, vault) = vault_with_alice(&alice).await;
    let store = vault.grants().expect("grants");
    suite::a_holder_process_that_dies_lets_go(store, &alice, move || spawn_holder(&path)).await;
}

/// A new vault in a temporary directory (kept while the directory lives) with the test's
/// credentials and `alice`'s grant connected.
async fn vault_with_alice(alice: &GrantKey) -> (tempfile::TempDir, std::path::PathBuf, FileVault) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("vault.spv");
    let vault =
        FileVault::create(&path, HOLDER_PASSPHRASE, KdfParams::new(1024, 1, 1)).expect("create");
    for meta in credentials() {
        vault.add(meta, Secret::new("client-secret")).expect("add");
    }
    vault
        .grants()
        .expect("grants")
        .put(alice, suite::connected("rt-alice-1"))
        .await
        .expect("put");
    (dir, path, vault)
}

/// This test binary run again as the holder of `alice`'s grant in the vault at `path`
/// (`a_file_vault_holder_process_killed_mid_hold_lets_go`'s holder side): it prints `held`
/// on its piped stdout and holds until killed.
fn spawn_holder(path: &std::path::Path) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "a_file_vault_holder_process_killed_mid_hold_lets_go",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLDER_VAULT, path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn the holder")
}

/// A file vault's refresh waits for another process's hold of the same grant as long as
/// `with_refresh_wait` says and no longer: the hold is refused, saying why, while the holder
/// (the test above run again, holding until killed) still holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_vault_hold_kept_by_another_process_is_waited_for_as_long_as_refresh_wait() {
    use std::io::BufRead as _;
    let alice = GrantKey::for_subject("github", "alice");
    let (_dir, path, _vault) = vault_with_alice(&alice).await;
    let mut holder = spawn_holder(&path);
    let stdout = holder.stdout.take().expect("stdout");
    let held = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.starts_with("held"));
    assert!(held, "the holder did not hold");

    let waiting = FileVault::open(&path).with_refresh_wait(std::time::Duration::from_millis(1500));
    waiting.unlock(HOLDER_PASSPHRASE).expect("unlock");
    let store = waiting.grants().expect("grants");
    let started = std::time::Instant::now();
    let (sent, got) = std::sync::mpsc::channel();
    let key = alice.clone();
    std::thread::spawn(move || {
        let _ = sent.send(store.hold_refresh(&key).map(|held| held.is_some()));
    });
    let refused = got
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the hold is refused in time, not waited for as long as the holder holds");
    let waited = started.elapsed();
    holder.kill().expect("kill the holder");
    let _ = holder.wait();
    let Err(VaultError::Backend(reason)) = refused else {
        panic!("the hold was not refused: {refused:?}");
    };
    assert!(reason.contains("for over 1500 ms"), "{reason}");
    assert!(
        waited >= std::time::Duration::from_millis(1400)
            && waited < std::time::Duration::from_secs(10),
        "{waited:?}"
    );
}
