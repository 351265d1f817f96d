//! Connecting accounts with every tracing line of this process captured at TRACE (a global
//! subscriber, so this is a test binary of its own), against the real provider: a connect
//! that succeeds, a replayed code, a redirect of another `state` and a refusal. The PKCE
//! verifier (as the provider received it), the code, the tokens stored and the client secret
//! appear in none of the lines, plain or base64.

use std::io::Write;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, GrantKey, MemoryVault, OAuthClient, Secret, Vault,
};
use sallyport_http::HttpChannel;
use sallyport_http::oauth::{Connect, ConnectError};
use sallyport_tests::oidc::{OidcProvider, WEBAPP_CLIENT};

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("sink").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const REDIRECT: &str = "http://127.0.0.1:50123/callback";

fn param(url: &str, name: &str) -> String {
    url::Url::parse(url)
        .expect("URL")
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("no {name} in {url}"))
}

#[tokio::test]
async fn no_trace_line_carries_the_verifier_the_code_a_token_or_the_client_secret() {
    let sink = Sink::default();
    let writer = sink.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .expect("the only subscriber of this binary");

    let provider = OidcProvider::start(60).await;
    let vault = MemoryVault::new();
    vault.set(
        CredentialMeta::new(
            "github",
            CredentialKind::OAuthRefresh(
                OAuthClient::new(WEBAPP_CLIENT.0, provider.token_endpoint())
                    .with_scopes(["openid", "offline_access", "api:read"])
                    .with_authorization_endpoint(format!("{}/auth", provider.issuer()))
                    .per_subject(),
            ),
            Binding::url("https://api.example.com"),
        ),
        Secret::new(WEBAPP_CLIENT.1),
    );
    let channel = HttpChannel::builder().build().expect("channel");
    let start = || async {
        channel
            .connect(
                &vault,
                Connect::subject("github", "alice").redirect_uri(REDIRECT),
            )
            .await
            .expect("pending")
    };

    // Connected.
    let pending = start().await;
    let redirect = provider
        .browse(pending.authorization_url(), Some("alice"))
        .await;
    let code = param(&redirect, "code");
    let state = param(&redirect, "state");
    let query = redirect.split_once('?').expect("query").1.to_owned();
    channel
        .finish_connect(&vault, pending, &query)
        .await
        .expect("connected");
    // The code again, under another connect's state: refused by the provider.
    let again = start().await;
    let replay = format!("code={code}&state={}", again.state());
    let err = channel
        .finish_connect(&vault, again, &replay)
        .await
        .expect_err("replayed");
    assert!(matches!(err, ConnectError::CodeRefused { .. }), "{err:?}");
    // The first redirect handed to another connect: not its state.
    let other = start().await;
    let err = channel
        .finish_connect(&vault, other, &query)
        .await
        .expect_err("mismatch");
    assert!(matches!(err, ConnectError::StateMismatch), "{err:?}");
    // A refusal.
    let refused = start().await;
    let redirect = provider
        .browse(refused.authorization_url(), Some("refuse"))
        .await;
    let err = channel
        .finish_connect(&vault, refused, redirect.split_once('?').expect("query").1)
        .await
        .expect_err("refused");
    assert!(matches!(err, ConnectError::Refused { .. }), "{err:?}");

    let grant = vault
        .grants()
        .expect("grants")
        .current(&GrantKey::for_subject("github", "alice"))
        .await
        .expect("grant");
    let mut secrets: Vec<String> = grant.secrets().map(str::to_owned).collect();
    assert_eq!(secrets.len(), 2);
    let verifiers: Vec<String> = provider
        .events()
        .iter()
        .filter_map(|e| e["code_verifier"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(verifiers.len(), 1, "one code exchanged");
    secrets.extend(verifiers);
    secrets.push(code);
    secrets.push(WEBAPP_CLIENT.1.to_owned());

    let logs = String::from_utf8_lossy(&sink.0.lock().expect("sink")).into_owned();
    // The lines are there: the connect's own, and the HTTP client's at TRACE.
    assert!(logs.contains("OAuth account connected"), "{logs}");
    assert!(
        logs.contains("OAuth connect: the code was refused"),
        "{logs}"
    );
    assert!(logs.contains("state that does not match"), "{logs}");
    assert!(logs.contains("TRACE"), "{logs}");
    assert!(!logs.contains(&state), "the state is not logged either");
    let b64 = base64::engine::general_purpose::STANDARD;
    for secret in &secrets {
        for form in [secret.clone(), b64.encode(secret)] {
            assert!(!logs.contains(&form), "a secret in a TRACE line: {logs}");
        }
    }
}
