//! "Connect an account" with every tracing line of this process captured at TRACE (a global
//! subscriber, so this is a test binary of its own): the console, its HTTP server, the
//! connector and the channel, against the real provider. A connect that finishes, the same
//! redirect delivered again, and a refusal; then neither the code, the PKCE verifier (as the
//! provider received it), the tokens stored nor the client secret appear in any line, plain
//! or base64.

#[path = "integration/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use sallyport_console::{Console, HttpConnector, LoginToken};
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, GrantKey, MemoryVault, OAuthClient, Secret, Vault,
};
use sallyport_http::HttpChannel;
use sallyport_tests::oidc::{OidcProvider, WEBAPP_CLIENT};

use common::{LOGIN, Sink, http, login_at, urlencode};

fn param(url: &str, name: &str) -> String {
    reqwest::Url::parse(url)
        .expect("URL")
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("no {name} in {url}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_trace_line_of_a_console_connect_carries_the_code_the_verifier_a_token_or_the_secret() {
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
    let vault = Arc::new(MemoryVault::new());
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
    let shared: Arc<dyn Vault> = vault.clone();
    let console = Console::journal_only(Arc::new(sallyport_core::journal::MemoryJournal::new()))
        .scrubber(shared.scrubber())
        .user("operator", LoginToken::new(LOGIN).expect("token"))
        .connect_accounts(
            HttpConnector::new(HttpChannel::builder().build().expect("channel"), shared)
                .credential("github")
                .subject_as_login_hint(),
        )
        .build()
        .expect("console");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { console.serve(listener).await });

    let (session, csrf) = login_at(addr, LOGIN).await;
    let start = |subject: &'static str| {
        let (session, csrf) = (session.clone(), csrf.clone());
        async move {
            let form = urlencode(&[
                ("csrf", &csrf),
                ("credential", "github"),
                ("subject", subject),
            ]);
            let started = http(addr, "POST", "/connect", Some(&session), Some(&form)).await;
            assert_eq!(started.status, 303, "{}", started.body);
            let binding = started
                .set_cookies()
                .into_iter()
                .filter_map(|c| c.split(';').next())
                .find(|c| c.starts_with("sallyport_console_connect_"))
                .expect("binding cookie")
                .to_owned();
            let location = started.header("location").expect("location").to_owned();
            (location, format!("{session}; {binding}"))
        }
    };
    let deliver = |redirect: String, cookies: String| async move {
        let path = redirect
            .strip_prefix(&format!("http://{addr}"))
            .expect("to the console")
            .to_owned();
        http(addr, "GET", &path, Some(&cookies), None).await
    };

    // Connected, then the same redirect again (refused), then a refusal at the provider.
    let (url, cookies) = start("alice").await;
    let redirect = provider.browse(&url, None).await;
    let code = param(&redirect, "code");
    assert_eq!(deliver(redirect.clone(), cookies.clone()).await.status, 303);
    assert_eq!(deliver(redirect, cookies).await.status, 400);
    let (url, cookies) = start("refuse").await;
    let refused = provider.browse(&url, None).await;
    assert_eq!(deliver(refused, cookies).await.status, 400);

    let grant = vault
        .grants()
        .expect("grants")
        .current(&GrantKey::for_subject("github", "alice"))
        .await
        .expect("alice's grant");
    let mut secrets: Vec<String> = grant.secrets().map(str::to_owned).collect();
    assert_eq!(secrets.len(), 2, "an access and a refresh token");
    let mut verifiers = Vec::new();
    for _ in 0..200 {
        verifiers = provider
            .events()
            .iter()
            .filter(|e| e["event"] == "token")
            .filter_map(|e| e["code_verifier"].as_str().map(str::to_owned))
            .collect();
        if !verifiers.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(verifiers.len(), 1, "one code exchanged");
    secrets.extend(verifiers);
    secrets.push(code);
    secrets.push(WEBAPP_CLIENT.1.to_owned());

    let log = sink.text();
    assert!(
        log.contains("console connect finished"),
        "the console's own lines were captured"
    );
    assert!(log.contains("console connect refused"), "{log}");
    for secret in &secrets {
        let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
        assert!(
            !log.contains(secret.as_str()) && !log.contains(&b64),
            "a secret in a TRACE line"
        );
    }
}
