//! `sallyport vault grants …` as a real process against the real provider (`oidc-provider`):
//! `list` shows subjects, scopes, expiry and state and never a token; `disconnect` revokes
//! the grant at the provider (its own `revoked` event, and the old refresh token refused at
//! its token endpoint) and removes it; with the provider down it keeps the grant and exits 15,
//! and `--force` removes it and says it was not revoked. No output holds a token, the client
//! secret or the passphrase.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, FileVault, GrantKey, GrantUpdate, OAuthClient, Secret,
    Vault, VaultAdmin,
};
use sallyport_tests::oidc::{OidcProvider, WEBAPP_CLIENT, form};
use sallyport_tests::vault_rig::{PASSPHRASE, fast_kdf};
use serde_json::Value;

const SCOPE: &str = "openid offline_access api:read";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `sallyport --vault VAULT ARGS` with the passphrase on stdin, and checks that no
/// canary is in its output.
fn run(vault: &Path, args: &[&str], canaries: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .arg("--vault")
        .arg(vault)
        .args(args)
        .env_clear()
        .env("HOME", vault.parent().expect("dir"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
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
    for canary in canaries.iter().chain([&PASSPHRASE, &WEBAPP_CLIENT.1]) {
        assert!(!all.contains(canary), "a secret was printed: {all}");
    }
    out
}

/// A vault file holding `github` (per subject, revoked at the provider's endpoint) with the
/// grants of `users`; their refresh tokens.
async fn vault_with_grants(
    dir: &Path,
    provider: &OidcProvider,
    users: &[&str],
) -> (PathBuf, Vec<String>) {
    let path = dir.join("vault.spv");
    let vault = FileVault::create(&path, PASSPHRASE, fast_kdf()).expect("vault");
    vault
        .add(
            CredentialMeta::new(
                "github",
                CredentialKind::OAuthRefresh(
                    OAuthClient::new(WEBAPP_CLIENT.0, provider.token_endpoint())
                        .with_scopes(["api:read"])
                        .with_revocation_endpoint(format!("{}/token/revocation", provider.issuer()))
                        .per_subject(),
                ),
                Binding::url("https://api.example.com"),
            ),
            Secret::new(WEBAPP_CLIENT.1),
        )
        .expect("add github");
    let store = vault.grants().expect("grants");
    let mut tokens = Vec::new();
    for user in users {
        let grant = provider.authorize(user, SCOPE).await;
        store
            .put(
                &GrantKey::for_subject("github", *user),
                GrantUpdate::Connected {
                    refresh_token: Secret::new(grant.refresh_token.clone()),
                },
            )
            .await
            .expect("connect");
        tokens.push(grant.refresh_token);
    }
    vault.lock();
    (path, tokens)
}

/// The provider's answer to `refresh_token` presented at its token endpoint directly.
async fn present(provider: &OidcProvider, refresh_token: &str) -> (u16, String) {
    let http = sallyport_http::HttpChannel::builder()
        .build()
        .expect("channel")
        .client(Duration::from_secs(5))
        .expect("client");
    let answer = http
        .post(provider.token_endpoint())
        .basic_auth(WEBAPP_CLIENT.0, Some(WEBAPP_CLIENT.1))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
        ]))
        .send()
        .await
        .expect("token request");
    let status = answer.status().as_u16();
    let body: Value = serde_json::from_slice(&answer.bytes().await.expect("body")).expect("JSON");
    (
        status,
        body["error"].as_str().unwrap_or_default().to_owned(),
    )
}

fn listed_subjects(vault: &Path, canaries: &[&str]) -> Vec<String> {
    let out = run(vault, &["vault", "grants", "list", "--json"], canaries);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON list");
    list.iter()
        .map(|g| g["subject"].as_str().expect("subject").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_list_shows_no_token_and_disconnect_revokes_at_the_provider_then_removes() {
    let provider = OidcProvider::start(60).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (vault, tokens) = vault_with_grants(dir.path(), &provider, &["alice", "bob"]).await;
    let canaries: Vec<&str> = tokens.iter().map(String::as_str).collect();

    // The list: subjects, scopes, state; never a value.
    let out = run(&vault, &["vault", "grants", "list", "--json"], &canaries);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(list.as_array().expect("array").len(), 2);
    for (grant, user) in list.as_array().expect("array").iter().zip(["alice", "bob"]) {
        assert_eq!(grant["credential"], "github");
        assert_eq!(grant["subject"], user);
        assert_eq!(grant["scopes"], serde_json::json!(["api:read"]));
        // Stored without what was granted: the credential's scopes, marked as asked.
        assert_eq!(grant["scopes_granted"], false);
        assert_eq!(grant["state"], "connected");
        assert_eq!(grant["refresh_token"], true);
        assert_eq!(grant["expires_at"], Value::Null);
        assert_eq!(grant["reconnect"], Value::Null);
    }
    let out = run(
        &vault,
        &["vault", "grants", "list", "--credential", "github"],
        &canaries,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("CREDENTIAL") && lines[0].ends_with("SCOPES"));
    for (line, user) in lines[1..].iter().zip(["alice", "bob"]) {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            words,
            ["github", user, "connected", "-", "api:read", "(asked)"],
            "{line}"
        );
    }

    // Disconnect alice: revoked at the provider, then removed.
    let out = run(
        &vault,
        &[
            "vault",
            "grants",
            "disconnect",
            "github",
            "--subject",
            "alice",
        ],
        &canaries,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "disconnected the `github` account of subject `alice`: revoked at the provider and removed from the vault\n"
    );
    assert_eq!(provider.count("revoked"), 1, "{:?}", provider.events());
    assert_eq!(
        present(&provider, &tokens[0]).await,
        (400, "invalid_grant".to_owned())
    );
    assert_eq!(listed_subjects(&vault, &canaries), ["bob"]);

    // Again: nothing to disconnect, exit 5.
    let out = run(
        &vault,
        &[
            "vault",
            "grants",
            "disconnect",
            "github",
            "--subject",
            "alice",
        ],
        &canaries,
    );
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(
        text(&out.stderr),
        "sallyport: the `github` account of subject `alice` is not connected; nothing to disconnect\n"
    );
    // A credential held for each subject has no shared grant: exit 5, nothing changed.
    let out = run(
        &vault,
        &["vault", "grants", "disconnect", "github"],
        &canaries,
    );
    assert_eq!(out.status.code(), Some(5));
    assert!(
        text(&out.stderr).contains("name a subject"),
        "{}",
        text(&out.stderr)
    );

    // The provider goes down: bob's grant is kept, exit 15.
    drop(provider);
    let out = run(
        &vault,
        &[
            "vault",
            "grants",
            "disconnect",
            "github",
            "--subject",
            "bob",
        ],
        &canaries,
    );
    assert_eq!(out.status.code(), Some(15), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "sallyport: the `github` account of subject `bob` was not revoked at the provider (the revocation endpoint could not be reached); the grant was NOT removed; disconnect again later, or force its removal\n"
    );
    assert_eq!(listed_subjects(&vault, &canaries), ["bob"]);

    // --force: removed here, and said that it was not revoked.
    let out = run(
        &vault,
        &[
            "vault",
            "grants",
            "disconnect",
            "github",
            "--subject",
            "bob",
            "--force",
        ],
        &canaries,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "disconnected the `github` account of subject `bob`: removed from the vault because the removal was forced, but NOT revoked at the provider (the revocation endpoint could not be reached); its tokens may stay valid there until they expire or the user revokes the access at the provider\n"
    );
    let out = run(&vault, &["vault", "grants", "list"], &canaries);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "no grants\n");
}
