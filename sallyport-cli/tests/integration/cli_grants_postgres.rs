//! `sallyport vault grants …` on the grants a fleet keeps in PostgreSQL
//! (`SALLYPORT_GRANTS_POSTGRES`, the store's key read from the vault as `grants-key`), as a
//! real process against a real database: `list` shows each subject's grant from the store
//! and never a token; `disconnect` removes a subject's grant from the store (the credential
//! has no revocation endpoint, so here only, and the command says so). Without the variable
//! the vault file's own (empty) grants are listed, as before.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, FileVault, GrantKey, GrantStore, GrantUpdate,
    OAuthClient, Secret, VaultAdmin,
};
use sallyport_postgres::{GrantKek, PgGrantStore};
use sallyport_tests::postgres::TestDb;
use sallyport_tests::vault_rig::{PASSPHRASE, fast_kdf};
use serde_json::Value;

const CLIENT_SECRET: &str = "pg-grants-client-secret-canary-5d1";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `sallyport --vault VAULT ARGS` with the passphrase on stdin and `env`, checking that
/// no canary is in its output.
fn run(vault: &Path, args: &[&str], env: &[(&str, &str)], canaries: &[String]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .arg("--vault")
        .arg(vault)
        .args(args)
        .env_clear()
        .env("HOME", vault.parent().expect("dir"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sallyport");
    let _ = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{PASSPHRASE}\n").as_bytes());
    let out = child.wait_with_output().expect("wait");
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    for canary in canaries
        .iter()
        .map(String::as_str)
        .chain([PASSPHRASE, CLIENT_SECRET])
    {
        assert!(!all.contains(canary), "a secret was printed: {all}");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_kept_in_postgres_are_listed_and_disconnected_through_the_vault_file() {
    let db = TestDb::create().await;
    let kek = GrantKek::generate().expect("key");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("vault.spv");
    let vault = FileVault::create(&path, PASSPHRASE, fast_kdf()).expect("vault");
    vault
        .add(
            CredentialMeta::new(
                "github",
                CredentialKind::OAuthRefresh(
                    OAuthClient::new("my-app", "https://github.com/login/oauth/access_token")
                        .with_scopes(["repo"])
                        .per_subject(),
                ),
                Binding::url("https://api.github.com"),
            ),
            Secret::new(CLIENT_SECRET),
        )
        .expect("add github");
    vault
        .add(
            CredentialMeta::new(
                "grants-key",
                CredentialKind::Bearer,
                Binding::url("https://grants.invalid"),
            ),
            kek.to_secret(),
        )
        .expect("add the key");
    drop(vault);
    let store = PgGrantStore::builder(&db.url, kek.clone())
        .scopes("github", ["repo"])
        .connect()
        .await
        .expect("grant store");
    let mut canaries = vec![kek.to_secret().expose().to_owned()];
    for user in ["ana", "ben"] {
        let refresh = format!("rt-{user}-canary-7c41e2a9");
        store
            .put(
                &GrantKey::for_subject("github", user),
                GrantUpdate::Connected {
                    refresh_token: Secret::new(refresh.clone()),
                },
            )
            .await
            .expect("connect");
        canaries.push(refresh);
    }
    let url = db.url.clone();
    let listed = {
        let (path, canaries, url) = (path.clone(), canaries.clone(), url.clone());
        tokio::task::spawn_blocking(move || {
            run(
                &path,
                &["vault", "grants", "list", "--json"],
                &[("SALLYPORT_GRANTS_POSTGRES", url.as_str())],
                &canaries,
            )
        })
        .await
        .expect("list")
    };
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let views: Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    let subjects: Vec<&str> = views
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v["subject"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(subjects, ["ana", "ben"], "{views}");
    assert_eq!(views[0]["credential"], "github");
    assert_eq!(views[0]["scopes"], serde_json::json!(["repo"]));

    // Disconnect ben: no revocation endpoint, so removed here only.
    let disconnected = {
        let (path, canaries, url) = (path.clone(), canaries.clone(), url.clone());
        tokio::task::spawn_blocking(move || {
            run(
                &path,
                &[
                    "vault",
                    "grants",
                    "disconnect",
                    "github",
                    "--subject",
                    "ben",
                ],
                &[("SALLYPORT_GRANTS_POSTGRES", url.as_str())],
                &canaries,
            )
        })
        .await
        .expect("disconnect")
    };
    assert_eq!(
        disconnected.status.code(),
        Some(0),
        "{}",
        text(&disconnected.stderr)
    );
    assert!(
        text(&disconnected.stdout).contains("removed"),
        "{}",
        text(&disconnected.stdout)
    );
    let left = store.list(Some("github")).await.expect("list");
    let left: Vec<_> = left.iter().map(|g| g.subject.as_deref()).collect();
    assert_eq!(left, [Some("ana")]);

    // Without the variable, the vault file's own grants: none.
    let own = {
        let (path, canaries) = (path.clone(), canaries.clone());
        tokio::task::spawn_blocking(move || {
            run(&path, &["vault", "grants", "list"], &[], &canaries)
        })
        .await
        .expect("list")
    };
    assert_eq!(own.status.code(), Some(0), "{}", text(&own.stderr));
    assert_eq!(text(&own.stdout), "no grants\n");
}
