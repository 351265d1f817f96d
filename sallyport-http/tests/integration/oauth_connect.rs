//! Connecting an account against the real provider (`oidc-provider`, PKCE required, a native
//! client whose loopback redirect takes any port): `HttpChannel::connect` makes the
//! authorization URL, the rig plays the human's browser up to the redirect, and
//! `HttpChannel::finish_connect` checks it, exchanges the code and stores the grant. Then a
//! call as that subject is sent with that subject's token (the API asks the provider whose
//! it is). A redirect of another `state`, a replayed code and a refusal store nothing; a token
//! endpoint that fails (HTML, garbage, slow) stores nothing either. No verifier, code, token
//! or client secret appears in an error, a `Debug` output or a sentence.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use sallyport_core::journal::MemoryJournal;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, GrantKey, MemoryVault, OAuthClient, Secret, Vault,
};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_http::oauth::{Connect, ConnectError, PendingConnect};
use sallyport_tests::http_server::{Reply, Upstream};
use sallyport_tests::oidc::{IntrospectingApi, OidcProvider, WEBAPP_CLIENT};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::Digest as _;

/// Read one item as the session's subject.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_item", effect = observe, credential = "github")]
#[http(get = "/v1/items/{item_id}", result = Item)]
struct GetItem {
    item_id: String,
}

/// Who the provider says the token belongs to.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Item {
    id: String,
}

const SCOPES: [&str; 3] = ["openid", "offline_access", "api:read"];

/// The redirect URI of a CLI's loopback listener: any port is taken.
const REDIRECT: &str = "http://127.0.0.1:47613/callback";

/// A vault holding `github` (per subject unless `shared`), connectable at the provider.
fn vault(provider: &OidcProvider, api_url: &str, shared: bool) -> Arc<MemoryVault> {
    let mut client = OAuthClient::new(WEBAPP_CLIENT.0, provider.token_endpoint())
        .with_scopes(SCOPES)
        .with_authorization_endpoint(format!("{}/auth", provider.issuer()));
    if !shared {
        client = client.per_subject();
    }
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "github",
            CredentialKind::OAuthRefresh(client),
            Binding::url(api_url),
        ),
        Secret::new(WEBAPP_CLIENT.1),
    );
    vault
}

fn executor(vault: Arc<MemoryVault>, channel: HttpChannel) -> Executor {
    let vault: Arc<dyn Vault> = vault;
    Executor::builder(
        Catalog::builder()
            .action::<GetItem>()
            .build()
            .expect("catalog"),
    )
    .journal(MemoryJournal::new())
    .vault_arc(vault)
    .channel(channel)
    .build()
    .expect("executor")
}

/// The query of a redirect URL.
fn query_of(redirect: &str) -> String {
    reqwest::Url::parse(redirect)
        .expect("redirect URL")
        .query()
        .unwrap_or_default()
        .to_owned()
}

/// Parameter `name` of a redirect URL.
fn param(redirect: &str, name: &str) -> Option<String> {
    reqwest::Url::parse(redirect)
        .expect("redirect URL")
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// `text` holds none of `secrets`, plain or base64.
fn assert_no_secret(text: &str, secrets: &[&str]) {
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
        assert!(
            !text.contains(secret) && !text.contains(&b64),
            "a secret leaked in: {text}"
        );
    }
}

/// The PKCE verifiers the provider received with authorization codes.
/// The PKCE verifiers the provider received, once it has reported at least `n` of them: a
/// thread reads its events from its output, so the event of an exchange that just answered
/// can arrive a moment later (up to 10 s here).
async fn verifiers(provider: &OidcProvider, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let seen: Vec<String> = provider
            .events()
            .iter()
            .filter_map(|e| e["code_verifier"].as_str().map(str::to_owned))
            .collect();
        if seen.len() >= n || std::time::Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn start(channel: &HttpChannel, vault: &MemoryVault, connect: Connect) -> PendingConnect {
    channel
        .connect(vault, connect.redirect_uri(REDIRECT))
        .await
        .expect("connect started")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_subject_calls_with_its_own_token_and_the_grant_lists_the_scopes_granted() {
    let provider = OidcProvider::start(60).await;
    let api = IntrospectingApi::start(&provider).await;
    let vault = vault(&provider, api.url(), false);
    let store = vault.grants().expect("grants");
    let channel = HttpChannel::builder().build().expect("channel");
    let mut canaries: Vec<String> = vec![WEBAPP_CLIENT.1.to_owned()];
    let mut texts = Vec::new();
    for (n, user) in ["alice", "bob"].into_iter().enumerate() {
        let pending = start(&channel, &vault, Connect::subject("github", user)).await;
        let url = reqwest::Url::parse(pending.authorization_url()).expect("URL");
        let get = |k: &str| {
            url.query_pairs()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.into_owned())
        };
        assert_eq!(
            url.as_str().split('?').next(),
            Some(format!("{}/auth", provider.issuer()).as_str())
        );
        assert_eq!(get("response_type").as_deref(), Some("code"));
        assert_eq!(get("client_id").as_deref(), Some(WEBAPP_CLIENT.0));
        assert_eq!(get("redirect_uri").as_deref(), Some(REDIRECT));
        assert_eq!(
            get("scope").as_deref(),
            Some("openid offline_access api:read")
        );
        assert_eq!(get("code_challenge_method").as_deref(), Some("S256"));
        assert_eq!(get("state").as_deref(), Some(pending.state()));
        assert_eq!(get("prompt").as_deref(), Some("consent"), "offline_access");
        assert_eq!(get("login_hint"), None);
        let challenge = get("code_challenge").expect("challenge");
        assert_eq!(challenge.len(), 43);
        assert_eq!(pending.state().len(), 43);
        texts.push(format!("{pending:?}"));
        assert!(!format!("{pending:?}").contains(pending.state()));

        let redirect = provider
            .browse(pending.authorization_url(), Some(user))
            .await;
        assert!(redirect.starts_with(REDIRECT), "{redirect}");
        let code = param(&redirect, "code").expect("code");
        canaries.push(code);
        let connected = channel
            .finish_connect(
                vault.as_ref(),
                pending,
                &format!("?{}", query_of(&redirect)),
            )
            .await
            .expect("connected");
        assert_eq!(connected.key, GrantKey::for_subject("github", user));
        assert_eq!(connected.scopes, SCOPES);
        let left = connected
            .expires_at
            .duration_since(SystemTime::now())
            .expect("expires later");
        assert!(
            left > Duration::from_secs(50) && left <= Duration::from_secs(60),
            "{left:?}"
        );
        assert_eq!(
            connected.to_string(),
            format!(
                "connected the `github` account of subject `{user}` with scopes `openid offline_access api:read`"
            )
        );
        texts.push(format!("{connected} {connected:?}"));

        // The verifier the provider received is the one whose S256 the URL carried.
        let verifier = verifiers(&provider, n + 1).await.pop().expect("verifier");
        assert_eq!(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(verifier.as_bytes())),
            challenge
        );
        canaries.push(verifier);
        let grant = store
            .current(&GrantKey::for_subject("github", user))
            .await
            .expect("stored");
        assert_eq!(grant.version(), 1);
        canaries.extend(grant.secrets().map(str::to_owned));
        assert_eq!(grant.secrets().count(), 2, "refresh and access token");
    }
    assert_eq!(provider.tokens_issued("authorization_code"), 2);

    // The list shows the scopes the provider granted, per subject; never a token.
    let listed = store.list(Some("github")).await.expect("list");
    assert_eq!(
        listed
            .iter()
            .map(|g| (g.subject.clone(), g.scopes.clone(), g.refresh_token))
            .collect::<Vec<_>>(),
        [
            (
                Some("alice".to_owned()),
                SCOPES.map(str::to_owned).to_vec(),
                true
            ),
            (
                Some("bob".to_owned()),
                SCOPES.map(str::to_owned).to_vec(),
                true
            ),
        ]
    );
    texts.push(format!("{listed:?}"));

    // Each subject's call goes out with its own token: the API asks the provider whose it
    // is. The connect's access token is used as it is: no refresh.
    let executor = executor(Arc::clone(&vault), channel.clone());
    for user in ["alice", "bob", "alice"] {
        let session = Session::new(format!("chat-{user}")).for_subject(user);
        let result = executor
            .call("get_item", json!({"item_id": "i1"}), &session)
            .await;
        assert_eq!(result.status, Status::Completed, "{}", result.summary());
        assert_eq!(result.data.as_ref().expect("data")["id"], user);
        texts.push(result.to_json().to_string());
    }
    assert_eq!(api.accepted(), 3);
    assert_eq!(provider.tokens_issued("refresh_token"), 0);
    assert_eq!(provider.reuse_detections(), 0);
    let canaries: Vec<&str> = canaries.iter().map(String::as_str).collect();
    assert_no_secret(&texts.join("\n"), &canaries);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_grant_is_connected_without_a_subject_and_replaces_the_one_held() {
    let provider = OidcProvider::start(60).await;
    let api = IntrospectingApi::start(&provider).await;
    let vault = vault(&provider, api.url(), true);
    let store = vault.grants().expect("grants");
    let channel = HttpChannel::builder().build().expect("channel");
    let mut refresh_tokens = Vec::new();
    for round in 1..=2 {
        let pending = start(
            &channel,
            &vault,
            Connect::shared("github").scopes(["openid", "offline_access"]),
        )
        .await;
        assert_eq!(pending.scopes(), ["openid", "offline_access"]);
        let redirect = provider.browse(pending.authorization_url(), None).await;
        let connected = channel
            .finish_connect(vault.as_ref(), pending, &query_of(&redirect))
            .await
            .expect("connected");
        assert_eq!(connected.key, GrantKey::shared("github"));
        assert_eq!(connected.scopes, ["openid", "offline_access"]);
        let grant = store
            .current(&GrantKey::shared("github"))
            .await
            .expect("grant");
        assert_eq!(grant.version(), round);
        refresh_tokens.push(grant.refresh_token().expect("refresh").expose().to_owned());
    }
    assert_ne!(refresh_tokens[0], refresh_tokens[1]);
    let executor = executor(Arc::clone(&vault), channel);
    let result = executor
        .call("get_item", json!({"item_id": "i1"}), &Session::new("s"))
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.summary());
    // The provider's default account for a browser that names none.
    assert_eq!(result.data.as_ref().expect("data")["id"], "alice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_with_another_or_no_state_is_refused_and_nothing_is_exchanged_or_stored() {
    let provider = OidcProvider::start(60).await;
    let vault = vault(&provider, "http://127.0.0.1:9", false);
    let store = vault.grants().expect("grants");
    let channel = HttpChannel::builder().build().expect("channel");
    for forged in [true, false] {
        let pending = start(&channel, &vault, Connect::subject("github", "alice")).await;
        let redirect = provider
            .browse(pending.authorization_url(), Some("alice"))
            .await;
        let code = param(&redirect, "code").expect("code");
        let query = if forged {
            // The state of another connect (an attacker's own).
            let other = start(&channel, &vault, Connect::subject("github", "alice")).await;
            format!("code={code}&state={}", other.state())
        } else {
            format!("code={code}")
        };
        let err = channel
            .finish_connect(vault.as_ref(), pending, &query)
            .await
            .expect_err("refused");
        assert!(matches!(err, ConnectError::StateMismatch), "{err:?}");
        assert_eq!(
            err.to_string(),
            "the redirect's state does not match this connect; nothing was exchanged or stored"
        );
        assert_no_secret(&format!("{err} {err:?}"), &[&code, WEBAPP_CLIENT.1]);
    }
    assert_eq!(provider.tokens_issued("authorization_code"), 0);
    assert_eq!(provider.count("grant_error"), 0, "nothing was presented");
    assert!(store.list(None).await.expect("list").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_code_is_refused_stores_nothing_and_the_first_grant_stays() {
    let provider = OidcProvider::start(60).await;
    let vault = vault(&provider, "http://127.0.0.1:9", false);
    let store = vault.grants().expect("grants");
    let channel = HttpChannel::builder().build().expect("channel");
    let first = start(&channel, &vault, Connect::subject("github", "alice")).await;
    let second = start(&channel, &vault, Connect::subject("github", "alice")).await;
    assert_ne!(first.state(), second.state());
    let redirect = provider
        .browse(first.authorization_url(), Some("alice"))
        .await;
    let code = param(&redirect, "code").expect("code");
    channel
        .finish_connect(vault.as_ref(), first, &query_of(&redirect))
        .await
        .expect("connected");
    let key = GrantKey::for_subject("github", "alice");
    let before = store.current(&key).await.expect("grant");
    assert_eq!(before.version(), 1);

    // The same redirect handed to the second connect: not its state.
    let err = channel
        .finish_connect(vault.as_ref(), second, &query_of(&redirect))
        .await
        .expect_err("another connect's redirect");
    assert!(matches!(err, ConnectError::StateMismatch), "{err:?}");

    // The code presented again under a connect's own state (the first one is consumed).
    let third = start(&channel, &vault, Connect::subject("github", "alice")).await;
    let state = third.state().to_owned();
    let err = channel
        .finish_connect(vault.as_ref(), third, &format!("code={code}&state={state}"))
        .await
        .expect_err("replayed");
    assert!(matches!(err, ConnectError::CodeRefused { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the provider refused to exchange the code for the `github` account of subject `alice` (the provider answered `invalid_grant`); nothing was stored; connect again"
    );
    let after = store.current(&key).await.expect("grant");
    assert_eq!(after.version(), 1, "nothing stored the second time");
    assert_eq!(
        after.refresh_token().map(Secret::expose),
        before.refresh_token().map(Secret::expose)
    );
    assert_eq!(
        after.access_token().map(Secret::expose),
        before.access_token().map(Secret::expose)
    );
    let received = verifiers(&provider, 1).await;
    assert_eq!(provider.tokens_issued("authorization_code"), 1);
    let mut secrets: Vec<String> = before.secrets().map(str::to_owned).collect();
    secrets.push(code);
    secrets.extend(received);
    secrets.push(WEBAPP_CLIENT.1.to_owned());
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    assert_no_secret(&format!("{err} {err:?}"), &secrets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_access_denied_redirect_is_refused_with_plain_text_and_nothing_is_stored() {
    let provider = OidcProvider::start(60).await;
    let vault = vault(&provider, "http://127.0.0.1:9", false);
    let store = vault.grants().expect("grants");
    let channel = HttpChannel::builder().build().expect("channel");
    let pending = start(&channel, &vault, Connect::subject("github", "carol")).await;
    // The account `refuse` refuses at the provider.
    let redirect = provider
        .browse(pending.authorization_url(), Some("refuse"))
        .await;
    assert_eq!(param(&redirect, "error").as_deref(), Some("access_denied"));
    assert_eq!(param(&redirect, "code"), None);
    let err = channel
        .finish_connect(vault.as_ref(), pending, &query_of(&redirect))
        .await
        .expect_err("refused");
    match &err {
        ConnectError::Refused { error, description } => {
            assert_eq!(error, "access_denied");
            assert_eq!(
                description.as_deref(),
                Some("The user refused the access?<b>no</b>")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "the provider refused the authorization: `access_denied` (The user refused the access?<b>no</b>); nothing was stored"
    );
    assert_eq!(provider.tokens_issued("authorization_code"), 0);
    assert!(store.list(None).await.expect("list").is_empty());
}

#[tokio::test]
async fn credentials_that_cannot_be_connected_and_bad_redirects_are_refused_before_anything_is_sent()
 {
    let token = Upstream::start(|_| Reply::Json(500, json!({}))).await;
    let endpoint = format!("{}/token", token.url());
    let vault = MemoryVault::new();
    let set = |name: &str, kind: CredentialKind| {
        vault.set(
            CredentialMeta::new(name, kind, Binding::url("https://api.example.com")),
            Secret::new("client-secret-canary-3e"),
        );
    };
    let auth = "https://id.example.com/authorize?prompt=select_account";
    set(
        "machine",
        CredentialKind::OAuthClientCredentials(
            OAuthClient::new("m", &endpoint).with_authorization_endpoint(auth),
        ),
    );
    set(
        "no-endpoint",
        CredentialKind::OAuthRefresh(OAuthClient::new("w", &endpoint).per_subject()),
    );
    set(
        "plain-http",
        CredentialKind::OAuthRefresh(
            OAuthClient::new("w", &endpoint)
                .per_subject()
                .with_authorization_endpoint("http://id.example.com/auth"),
        ),
    );
    set(
        "github",
        CredentialKind::OAuthRefresh(
            OAuthClient::new("w", &endpoint)
                .per_subject()
                .with_scopes(["repo"])
                .with_authorization_endpoint(auth),
        ),
    );
    set("static", CredentialKind::Bearer);
    let channel = HttpChannel::builder().build().expect("channel");
    let refused = |connect: Connect| {
        let channel = channel.clone();
        let vault = &vault;
        async move {
            channel
                .connect(vault, connect)
                .await
                .expect_err("refused")
                .to_string()
        }
    };
    let cases = [
        (
            Connect::shared("machine"),
            "the shared grant of `machine` cannot be connected: it is not an OAuth authorization-code credential (kind `oauth_refresh`)",
        ),
        (
            Connect::shared("static"),
            "the shared grant of `static` cannot be connected: it is not an OAuth authorization-code credential (kind `oauth_refresh`)",
        ),
        (
            Connect::subject("nobody", "alice"),
            "the `nobody` account of subject `alice` cannot be connected: there is no such credential",
        ),
        (
            Connect::subject("no-endpoint", "alice"),
            "the `no-endpoint` account of subject `alice` cannot be connected: the credential has no authorization endpoint configured",
        ),
        (
            Connect::subject("plain-http", "alice"),
            "the `plain-http` account of subject `alice` cannot be connected: the configured authorization endpoint is not https:// (plain http:// only on loopback); the human's browser would reach it in the clear",
        ),
        (
            Connect::shared("github"),
            "the shared grant of `github` cannot be connected: it is held for each subject: name the subject",
        ),
    ];
    for (connect, expected) in cases {
        assert_eq!(refused(connect.redirect_uri(REDIRECT)).await, expected);
    }
    for (uri, expected) in [
        (
            None,
            "the connect request is invalid: no redirect URI was given",
        ),
        (
            Some("http://localhost:8080/callback"),
            "the connect request is invalid: the redirect URI is neither http:// on a loopback address (127.0.0.1 or [::1]) nor https://",
        ),
        (
            Some("http://app.example.com/callback"),
            "the connect request is invalid: the redirect URI is neither http:// on a loopback address (127.0.0.1 or [::1]) nor https://",
        ),
    ] {
        let mut connect = Connect::subject("github", "alice");
        if let Some(uri) = uri {
            connect = connect.redirect_uri(uri);
        }
        assert_eq!(refused(connect).await, expected);
    }
    assert_eq!(
        refused(
            Connect::subject("github", "alice")
                .redirect_uri(REDIRECT)
                .scopes(["repo read"])
        )
        .await,
        "the connect request is invalid: `repo read` is not an OAuth scope token"
    );
    // The endpoint's own query is kept; the parameters follow it.
    let pending = channel
        .connect(
            &vault,
            Connect::subject("github", "alice")
                .redirect_uri("http://[::1]:8123/connect/callback")
                .login_hint("alice@example.com"),
        )
        .await
        .expect("pending");
    let url = pending.authorization_url();
    assert!(
        url.starts_with("https://id.example.com/authorize?prompt=select_account&response_type=code&client_id=w&redirect_uri=http%3A%2F%2F%5B%3A%3A1%5D%3A8123%2Fconnect%2Fcallback&scope=repo&state="),
        "{url}"
    );
    assert!(
        url.ends_with("&code_challenge_method=S256&login_hint=alice%40example.com"),
        "{url}"
    );
    assert_eq!(
        format!("{pending:?}"),
        "PendingConnect { key: GrantKey { credential: \"github\", subject: Some(\"alice\") }, redirect_uri: \"http://[::1]:8123/connect/callback\", scopes: [\"repo\"], .. }"
    );
    assert_eq!(token.requests(), 0, "nothing was sent");
}

/// What a fake token endpoint answers.
type MakeReply = Box<dyn Fn() -> Reply + Send + Sync>;

#[tokio::test]
async fn a_token_endpoint_that_fails_or_issues_no_refresh_token_stores_nothing() {
    let html = || {
        Reply::Raw(
            200,
            vec![("content-type".into(), "text/html".into())],
            bytes::Bytes::from_static(b"<html><body>Sign in</body></html>"),
        )
    };
    let cases: Vec<(MakeReply, Option<Duration>, &str)> = vec![
        (
            Box::new(html),
            None,
            "the token endpoint's answer is not an OAuth token response",
        ),
        (
            Box::new(|| {
                Reply::Raw(
                    200,
                    vec![("content-type".into(), "application/json".into())],
                    bytes::Bytes::from_static(b"{\"access_tok"),
                )
            }),
            None,
            "the token endpoint's answer is not an OAuth token response",
        ),
        (
            Box::new(|| {
                Reply::Json(
                    200,
                    json!({"access_token": "at-canary-9", "token_type": "Bearer", "expires_in": 60}),
                )
            }),
            None,
            "the provider issued no refresh token",
        ),
        (
            Box::new(|| {
                Reply::Json(
                    200,
                    json!({"access_token": "at-canary-9", "token_type": "Bearer", "refresh_token": "rt-canary-9"}),
                )
            }),
            Some(Duration::from_secs(3)),
            "the token endpoint did not answer within 300 ms",
        ),
    ];
    for (reply, delay, words) in cases {
        let token = Upstream::start(move |_| reply()).await;
        if let Some(delay) = delay {
            token.set_delay(delay);
        }
        let vault = MemoryVault::new();
        vault.set(
            CredentialMeta::new(
                "github",
                CredentialKind::OAuthRefresh(
                    OAuthClient::new("w", format!("{}/token", token.url()))
                        .per_subject()
                        .with_authorization_endpoint("https://id.example.com/auth"),
                ),
                Binding::url("https://api.example.com"),
            ),
            Secret::new("client-secret-canary-3e"),
        );
        let channel = HttpChannel::builder()
            .token_timeout(Duration::from_millis(300))
            .build()
            .expect("channel");
        let pending = start(&channel, &vault, Connect::subject("github", "alice")).await;
        let query = format!("state={}&code=code-canary-77", pending.state());
        let started = std::time::Instant::now();
        let err = channel
            .finish_connect(&vault, pending, &query)
            .await
            .expect_err("not connected");
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(matches!(err, ConnectError::Exchange { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(words), "{text}");
        assert!(text.ends_with("nothing was stored"), "{text}");
        assert_no_secret(
            &format!("{text} {err:?}"),
            &[
                "code-canary-77",
                "client-secret-canary-3e",
                "at-canary-9",
                "rt-canary-9",
            ],
        );
        // What the endpoint received: the code, the redirect URI and a verifier whose S256
        // is the challenge the URL carried; the client authenticated with basic auth.
        let received = token.received();
        assert_eq!(received.len(), 1);
        let form: Vec<(String, String)> = url::form_urlencoded::parse(&received[0].body)
            .into_owned()
            .collect();
        let names: Vec<&str> = form.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            ["grant_type", "code", "redirect_uri", "code_verifier"]
        );
        assert_eq!(form[0].1, "authorization_code");
        assert_eq!(form[1].1, "code-canary-77");
        assert_eq!(form[2].1, REDIRECT);
        assert_eq!(form[3].1.len(), 43);
        assert!(
            received[0]
                .header("authorization")
                .is_some_and(|v| v.starts_with("Basic "))
        );
        assert_no_secret(&format!("{text} {err:?}"), &[form[3].1.as_str()]);
        let store = vault.grants().expect("grants");
        assert!(store.list(None).await.expect("list").is_empty(), "{words}");
    }
}
