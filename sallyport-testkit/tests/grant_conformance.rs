//! The grant store conformance suite against the in-memory vault's store and the file
//! vault's (two instances on one file as the two handles, as two processes would open it).
//! PostgreSQL's runs in `sallyport-postgres`'s tests.

use std::sync::{Arc, Mutex};

use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, FileVault, KdfParams, MemoryVault, OAuthClient,
    Secret, Vault, VaultAdmin,
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
