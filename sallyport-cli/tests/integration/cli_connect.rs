//! `sallyport credentials connect` as a real process against the real provider
//! (`oidc-provider`), with a scripted browser: a task reads the authorization URL the command
//! prints, follows it at the provider as the user would, and delivers the redirect to the
//! command's loopback listener. The grant stored in the vault file is the user's (the provider
//! introspects its access token), `credentials list` shows the scopes granted, and
//! `credentials disconnect` removes it. A redirect with another `state` (exit 17), a refusal
//! (exit 16) and no redirect at all (exit 18) store nothing. No output holds the code, the
//! PKCE verifier, a token, the client secret or the passphrase.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, FileVault, GrantKey, OAuthClient, Secret, Vault,
    VaultAdmin,
};
use sallyport_tests::oidc::{OidcProvider, WEBAPP_CLIENT};
use sallyport_tests::vault_rig::{PASSPHRASE, fast_kdf};
use serde_json::Value;

const SCOPES: &str = "openid offline_access api:read";

/// A vault file holding `github`, per subject, connectable at the provider.
fn vault_file(dir: &Path, provider: &OidcProvider) -> PathBuf {
    let path = dir.join("vault.spv");
    let vault = FileVault::create(&path, PASSPHRASE, fast_kdf()).expect("vault");
    vault
        .add(
            CredentialMeta::new(
                "github",
                CredentialKind::OAuthRefresh(
                    OAuthClient::new(WEBAPP_CLIENT.0, provider.token_endpoint())
                        .with_scopes(SCOPES.split(' '))
                        .with_authorization_endpoint(format!("{}/auth", provider.issuer()))
                        .with_revocation_endpoint(format!("{}/token/revocation", provider.issuer()))
                        .per_subject(),
                ),
                Binding::url("https://api.example.com"),
            ),
            Secret::new(WEBAPP_CLIENT.1),
        )
        .expect("add github");
    vault.lock();
    path
}

fn sallyport(vault: &Path, args: &[&str]) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .arg("--vault")
        .arg(vault)
        .args(args)
        .env_clear()
        .env("HOME", vault.parent().expect("dir"))
        // No browser to open: the command must carry on without one.
        .env("PATH", "/nonexistent")
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
    child
}

/// A running `credentials connect`: the URL it printed, and its output so far.
struct Connecting {
    child: Child,
    url: String,
    stdout: String,
    rest: std::sync::mpsc::Receiver<String>,
}

/// Starts `credentials connect github --subject SUBJECT EXTRA…` and reads its output up to
/// the authorization URL.
fn start_connect(vault: &Path, subject: &str, extra: &[&str]) -> Connecting {
    let mut args = vec!["credentials", "connect", "github", "--subject", subject];
    args.extend_from_slice(extra);
    let mut child = sallyport(vault, &args);
    let stdout = child.stdout.take().expect("stdout");
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let (rest_tx, rest_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = String::new();
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            seen.push_str(&line);
            seen.push('\n');
            if !sent && line.starts_with("http") {
                let _ = url_tx.send((line.clone(), seen.clone()));
                sent = true;
            }
        }
        let _ = rest_tx.send(seen);
    });
    let (url, stdout) = url_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the command printed the authorization URL");
    Connecting {
        child,
        url,
        stdout,
        rest: rest_rx,
    }
}

impl Connecting {
    /// Waits for the command to end: its exit code, all its stdout and its stderr.
    fn finish(mut self) -> (Option<i32>, String, String) {
        let status = self.child.wait().expect("wait");
        let mut stderr = String::new();
        let _ = self
            .child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut stderr);
        let stdout = self
            .rest
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or(self.stdout);
        (status.code(), stdout, stderr)
    }
}

/// Delivers `redirect` to the command's listener as the browser would: the page it answers.
async fn deliver(redirect: &str) -> (u16, String) {
    let http = sallyport_http::HttpChannel::builder()
        .build()
        .expect("channel")
        .client(Duration::from_secs(10))
        .expect("client");
    let response = http
        .get(redirect)
        .send()
        .await
        .expect("the listener answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("page"))
}

fn param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .expect("URL")
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

fn assert_no_secret(text: &str, secrets: &[String]) {
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        assert!(
            !text.contains(secret.as_str()),
            "a secret was printed: {text}"
        );
    }
    assert!(!text.contains(PASSPHRASE), "{text}");
    assert!(!text.contains(WEBAPP_CLIENT.1), "{text}");
}

fn list(vault: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = sallyport(vault, args).wait_with_output().expect("wait");
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_with_a_scripted_browser_stores_the_users_grant_and_prints_no_value() {
    let provider = OidcProvider::start(60).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let vault = vault_file(dir.path(), &provider);

    let connecting = start_connect(&vault, "alice", &["--no-browser", "--timeout", "60"]);
    let url = connecting.url.clone();
    assert!(
        url.starts_with(&format!("{}/auth?", provider.issuer())),
        "{url}"
    );
    let redirect_uri = param(&url, "redirect_uri").expect("redirect_uri");
    assert!(
        redirect_uri.starts_with("http://127.0.0.1:") && redirect_uri.ends_with("/callback"),
        "{redirect_uri}"
    );
    assert!(
        connecting
            .stdout
            .contains("To connect `github` for subject `alice`, open this URL in a browser:"),
        "{}",
        connecting.stdout
    );
    // The browser: the login at the provider, then the redirect to the command.
    let redirect = provider.browse(&url, Some("alice")).await;
    assert!(redirect.starts_with(&redirect_uri), "{redirect}");
    let code = param(&redirect, "code").expect("code");
    assert_eq!(
        deliver(&redirect).await,
        (200, "Connected; you can close this tab.\n".to_owned())
    );
    let (status, stdout, stderr) = connecting.finish();
    assert_eq!(status, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("connected\n  credential: github\n  subject:    alice\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("  scopes:     {SCOPES}\n")),
        "{stdout}"
    );
    assert!(stdout.contains("  access token expires: 20"), "{stdout}");

    // The grant in the file is alice's: the provider says whose its access token is.
    let file = FileVault::open(&vault);
    file.unlock(PASSPHRASE).expect("unlock");
    let grant = file
        .grants()
        .expect("grants")
        .current(&GrantKey::for_subject("github", "alice"))
        .await
        .expect("alice's grant");
    let access = grant
        .access_token()
        .expect("access token")
        .expose()
        .to_owned();
    let refresh = grant
        .refresh_token()
        .expect("refresh token")
        .expose()
        .to_owned();
    let introspected = provider.introspect(&access).await;
    assert_eq!(introspected["active"], true);
    assert_eq!(introspected["sub"], "alice");
    file.lock();
    let mut secrets = vec![code, access, refresh];
    // The provider's events are read from its output by a thread: the exchange's event can
    // arrive a moment after its answer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let verifiers = loop {
        let seen: Vec<String> = provider
            .events()
            .iter()
            .filter_map(|e| e["code_verifier"].as_str().map(str::to_owned))
            .collect();
        if !seen.is_empty() || std::time::Instant::now() >= deadline {
            break seen;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    secrets.extend(verifiers);
    assert_eq!(secrets.len(), 4, "the verifier the provider received");
    assert_no_secret(&format!("{stdout}{stderr}"), &secrets);

    // Listed with the scopes granted, under both names of the command.
    for args in [
        &["credentials", "list", "--json"][..],
        &["vault", "grants", "list", "--json"][..],
    ] {
        let (status, out) = list(&vault, args);
        assert_eq!(status, Some(0), "{out}");
        assert_no_secret(&out, &secrets);
        let listed: Vec<Value> = serde_json::from_str(&out).expect("JSON");
        assert_eq!(listed.len(), 1, "{out}");
        assert_eq!(listed[0]["subject"], "alice");
        assert_eq!(listed[0]["state"], "active");
        assert_eq!(
            listed[0]["scopes"],
            serde_json::json!(["openid", "offline_access", "api:read"])
        );
        assert_eq!(listed[0]["scopes_granted"], true);
    }
    let (status, out) = list(&vault, &["credentials", "list"]);
    assert_eq!(status, Some(0), "{out}");
    assert!(out.contains("openid offline_access api:read"), "{out}");
    assert!(!out.contains("(asked)"), "{out}");

    // Disconnected under the new name: revoked at the provider, removed.
    let (status, out) = list(
        &vault,
        &["credentials", "disconnect", "github", "--subject", "alice"],
    );
    assert_eq!(status, Some(0), "{out}");
    assert!(
        out.contains("revoked at the provider and removed from the vault"),
        "{out}"
    );
    assert_no_secret(&out, &secrets);
    assert_eq!(provider.count("revoked"), 1);
    let (_, out) = list(&vault, &["credentials", "list", "--json"]);
    assert_eq!(out.trim(), "[]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_of_another_state_exits_17_a_refusal_16_and_no_redirect_18_storing_nothing() {
    let provider = OidcProvider::start(60).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let vault = vault_file(dir.path(), &provider);

    // Another state: the browser's redirect, its state replaced.
    let connecting = start_connect(&vault, "alice", &["--no-browser", "--timeout", "60"]);
    let redirect = provider.browse(&connecting.url, Some("alice")).await;
    let state = param(&redirect, "state").expect("state");
    let code = param(&redirect, "code").expect("code");
    let forged = redirect.replace(&state, "forged-state");
    // A browser's other request first: answered 404, the wait goes on.
    let origin = redirect
        .split("/callback")
        .next()
        .expect("origin")
        .to_owned();
    assert_eq!(deliver(&format!("{origin}/favicon.ico")).await.0, 404);
    let (page_status, page) = deliver(&forged).await;
    assert_eq!(page_status, 400);
    assert!(
        page.starts_with(
            "The account was NOT connected: the redirect's state does not match this connect"
        ),
        "{page}"
    );
    let (status, stdout, stderr) = connecting.finish();
    assert_eq!(status, Some(17), "{stdout}{stderr}");
    assert!(
        stderr.contains("nothing was exchanged or stored"),
        "{stderr}"
    );
    assert_no_secret(&format!("{stdout}{stderr}{page}"), &[code]);
    assert_eq!(provider.tokens_issued("authorization_code"), 0);

    // The user refuses at the provider.
    let connecting = start_connect(&vault, "carol", &["--no-browser", "--timeout", "60"]);
    let redirect = provider.browse(&connecting.url, Some("refuse")).await;
    let (page_status, page) = deliver(&redirect).await;
    assert_eq!(page_status, 400);
    assert!(page.contains("`access_denied`"), "{page}");
    let (status, stdout, stderr) = connecting.finish();
    assert_eq!(status, Some(16), "{stdout}{stderr}");
    assert!(
        stderr.contains("the provider refused the authorization: `access_denied`"),
        "{stderr}"
    );

    // Nobody comes back.
    let started = std::time::Instant::now();
    // Without --no-browser, and no browser to start: the command carries on.
    let connecting = start_connect(&vault, "dave", &["--timeout", "1"]);
    let (status, stdout, stderr) = connecting.finish();
    assert_eq!(status, Some(18), "{stdout}{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(
        stderr.contains("no redirect came back within 1 s; nothing was stored"),
        "{stderr}"
    );
    assert!(stderr.contains("could not start xdg-open"), "{stderr}");

    assert_eq!(provider.tokens_issued("authorization_code"), 0);
    let (status, out) = list(&vault, &["credentials", "list", "--json"]);
    assert_eq!(status, Some(0), "{out}");
    assert_eq!(out.trim(), "[]");
}
