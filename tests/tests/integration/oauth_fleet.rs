//! One OAuth grant, four executor processes (`oauth-caller`), one file vault on disk: against
//! the real provider (`oidc-provider`, access tokens of 2 seconds, refresh tokens rotated with
//! reuse detection, which revokes the whole grant when an old refresh token is presented),
//! every process calls until several tokens have expired under all of them at once. The
//! vault's refresh hold lets one process refresh per rotation and the others read its new
//! token: the provider never sees a refresh token twice, and every call completes.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, FileVault, GrantKey, GrantUpdate, OAuthClient, Secret,
    Vault, VaultAdmin,
};
use sallyport_tests::oidc::{IntrospectingApi, OidcProvider, WEBAPP_CLIENT};
use sallyport_tests::vault_rig::{PASSPHRASE, fast_kdf};

const PROCESSES: usize = 4;
const TTL: u64 = 2;
const SECONDS: u64 = 7;

fn race(vault: &str) -> Vec<Output> {
    let start_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .saturating_add(Duration::from_millis(1500))
        .as_millis()
        .to_string();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_oauth-caller"))
                .args([vault, PASSPHRASE, &start_at, &SECONDS.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn oauth-caller")
        })
        .collect();
    sallyport_tests::children::wait_all(children, Duration::from_secs(SECONDS + 300))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_on_one_file_vault_never_present_a_refresh_token_twice() {
    let provider = OidcProvider::start(TTL).await;
    let api = IntrospectingApi::start(&provider).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("fleet.spv");
    let vault = FileVault::create(&path, PASSPHRASE, fast_kdf()).expect("vault");
    vault
        .add(
            CredentialMeta::new(
                "api",
                CredentialKind::OAuthRefresh(
                    OAuthClient::new(WEBAPP_CLIENT.0, provider.token_endpoint())
                        .with_scopes(["api:read"]),
                ),
                Binding::url(api.url()),
            ),
            Secret::new(WEBAPP_CLIENT.1),
        )
        .expect("add");
    let grant = provider
        .authorize("dana", "openid offline_access api:read")
        .await;
    vault
        .grants()
        .expect("the file vault keeps grants")
        .replace(
            &GrantKey::shared("api"),
            0,
            GrantUpdate::Connected {
                refresh_token: Secret::new(grant.refresh_token),
            },
        )
        .await
        .expect("store the grant");
    drop(vault);

    let vault_path = path.display().to_string();
    let outputs = tokio::task::spawn_blocking(move || race(&vault_path))
        .await
        .expect("children");
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    for (i, out) in outputs.iter().enumerate() {
        assert!(
            out.status.success(),
            "process {i} exited {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            *statuses.entry(line.to_owned()).or_default() += 1;
        }
    }
    let refreshes = provider.tokens_issued("refresh_token");
    eprintln!(
        "{PROCESSES} processes for {SECONDS} s: {statuses:?}; {refreshes} refreshes of {TTL} s tokens; {} reuse detections",
        provider.reuse_detections()
    );
    assert_eq!(provider.reuse_detections(), 0, "{statuses:?}");
    assert_eq!(provider.count("grant_error"), 0, "{statuses:?}");
    let completed = statuses.get("completed").copied().unwrap_or(0);
    assert_eq!(
        statuses.values().sum::<usize>(),
        completed,
        "every call completed: {statuses:?}"
    );
    assert!(completed >= PROCESSES * 20, "{statuses:?}");
    // Tokens expired under every process several times; one refresh per rotation, not one
    // per process: a 2 s token is used for 1 s (a second short of `expires_in`, for the
    // provider's whole-second clock) and refreshed with a third of that left, about one
    // refresh every 0.67 s at most.
    assert!(
        (3..=(SECONDS as usize * 3 / 2 + 2)).contains(&refreshes),
        "{refreshes} refreshes"
    );
    assert_eq!(api.without_token(), 0);
    // Every call was sent with a token the provider still held active.
    assert_eq!(api.unauthorized(), 0);

    // The grant in the file is the live one: a fresh process refreshes with it.
    let vault = FileVault::open(&path);
    vault.unlock(PASSPHRASE).expect("unlock");
    let stored = vault
        .grants()
        .expect("grants")
        .current(&GrantKey::shared("api"))
        .await
        .expect("grant");
    assert!(stored.version() > refreshes as u64, "{stored:?}");
}
