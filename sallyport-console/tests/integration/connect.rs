//! "Connect an account" against the real OpenID provider (`oidc-provider`, run by node): a
//! console with an `HttpConnector` over a real executor, vault and HTTP channel; the API the
//! executor calls checks every token with the provider's introspection.
//!
//! The token endpoint the credential names is a tap in front of the provider's: it forwards
//! every token request and records what crossed it (the code, the PKCE verifier, the client
//! secret, the tokens), so every page, header and redirect the console answered is checked
//! against those values.
//!
//! The browser run (headless Chromium through chromedriver) connects alice's account from
//! the page, then alice's call goes out with her token; the other tests speak HTTP to the
//! console and let the rig play the provider's browser part (`OidcProvider::browse`).
//!
//! Needs node with `tests/oidc/node_modules` (and for the browser run, Chromium and
//! chromedriver): `tests/run.sh` installs them.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use fantoccini::Locator;
use sallyport_console::{Console, HttpConnector, LoginToken};
use sallyport_core::journal::MemoryJournal;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, GrantKey, GrantStore, MemoryVault, OAuthClient,
    Secret, Vault,
};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::oidc::{IntrospectingApi, OidcProvider, WEBAPP_CLIENT};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::browser::{chromedriver, session as browser_session, target_dir};
use crate::common::{Answer, LOGIN, http, login_at, urlencode};

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

/// What crossed the token endpoint: every request body, `Authorization` header and answer.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn push(&self, text: String) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(text);
    }

    /// Every secret value that crossed: form fields and JSON members that hold one.
    fn secrets(&self) -> Vec<String> {
        let seen = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut out = vec![WEBAPP_CLIENT.1.to_owned()];
        for text in seen {
            if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(&text) {
                for key in ["access_token", "refresh_token", "id_token"] {
                    if let Some(v) = map.get(key).and_then(Value::as_str) {
                        out.push(v.to_owned());
                    }
                }
            } else {
                let form = reqwest::Url::parse(&format!("http://form.invalid/?{text}"))
                    .expect("a form body");
                for (k, v) in form.query_pairs() {
                    if matches!(&*k, "code" | "code_verifier" | "refresh_token") {
                        out.push(v.into_owned());
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

#[derive(Clone)]
struct Tap {
    http: reqwest::Client,
    to: String,
    seen: Seen,
}

/// Forwards a token request to the provider and records both ways.
async fn forward(State(tap): State<Tap>, headers: HeaderMap, body: String) -> Response {
    tap.seen.push(body.clone());
    let mut request = tap
        .http
        .post(&tap.to)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body);
    if let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        tap.seen.push(auth.to_owned());
        request = request.header("authorization", auth);
    }
    let answer = request.send().await.expect("the provider's token endpoint");
    let status = StatusCode::from_u16(answer.status().as_u16()).expect("status");
    let text = answer.text().await.expect("token answer");
    tap.seen.push(text.clone());
    (status, [("content-type", "application/json")], text).into_response()
}

struct Rig {
    provider: OidcProvider,
    api: IntrospectingApi,
    seen: Seen,
    vault: Arc<MemoryVault>,
    executor: Executor,
    addr: SocketAddr,
}

async fn rig() -> Rig {
    let provider = OidcProvider::start(60).await;
    let api = IntrospectingApi::start(&provider).await;
    let http = HttpChannel::builder()
        .build()
        .expect("channel")
        .client(Duration::from_secs(5))
        .expect("client");
    let seen = Seen::default();
    let tap = Tap {
        http,
        to: provider.token_endpoint(),
        seen: seen.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let tap_url = format!("http://{}/token", listener.local_addr().expect("addr"));
    let app = axum::Router::new()
        .route("/token", axum::routing::post(forward))
        .with_state(tap);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "github",
            CredentialKind::OAuthRefresh(
                OAuthClient::new(WEBAPP_CLIENT.0, tap_url)
                    .with_scopes(["openid", "offline_access", "api:read"])
                    .with_authorization_endpoint(format!("{}/auth", provider.issuer()))
                    .per_subject(),
            ),
            Binding::url(api.url()),
        ),
        Secret::new(WEBAPP_CLIENT.1),
    );
    let channel = HttpChannel::builder().build().expect("channel");
    let shared: Arc<dyn Vault> = vault.clone();
    let executor = Executor::builder(
        Catalog::builder()
            .action::<GetItem>()
            .build()
            .expect("catalog"),
    )
    .journal(MemoryJournal::new())
    .vault_arc(Arc::clone(&shared))
    .channel(channel.clone())
    .build()
    .expect("executor");
    let console = Console::builder(executor.clone())
        .user("operator", LoginToken::new(LOGIN).expect("token"))
        .connect_accounts(
            HttpConnector::new(channel, shared)
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
    Rig {
        provider,
        api,
        seen,
        vault,
        executor,
        addr,
    }
}

impl Rig {
    /// Every secret of the connects so far: what the tap saw, and the PKCE verifiers the
    /// provider itself reports having received (which the tap must have seen too). The
    /// provider's events are read from its output as they come, so this waits (up to 10 s)
    /// for the first.
    async fn canaries(&self) -> Vec<String> {
        let mut secrets = self.seen.secrets();
        let mut verifiers: Vec<String> = Vec::new();
        for _ in 0..200 {
            verifiers = self
                .provider
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
        assert!(!verifiers.is_empty(), "the provider received a verifier");
        for verifier in verifiers {
            assert!(secrets.contains(&verifier), "the tap saw the verifier");
            secrets.push(verifier);
        }
        secrets
    }

    fn grants(&self) -> Arc<dyn GrantStore> {
        self.vault.grants().expect("a grant store")
    }

    async fn subjects(&self) -> Vec<String> {
        self.grants()
            .list(Some("github"))
            .await
            .expect("list")
            .into_iter()
            .filter_map(|g| g.subject)
            .collect()
    }

    /// Alice's call: its status and the id the API saw.
    async fn call_as(&self, subject: &str) -> (Status, Option<String>) {
        let result = self
            .executor
            .call(
                "get_item",
                json!({"item_id": "i1"}),
                &Session::new(format!("chat-{subject}")).for_subject(subject),
            )
            .await;
        let id = result
            .data
            .as_ref()
            .and_then(|d| d["id"].as_str())
            .map(str::to_owned);
        (result.status, id)
    }

    /// `POST /connect` for `subject`: the answer, the authorization URL and the binding
    /// cookie (`name=value`).
    async fn start(&self, session: &str, csrf: &str, subject: &str) -> (Answer, String, String) {
        let form = urlencode(&[
            ("csrf", csrf),
            ("credential", "github"),
            ("subject", subject),
        ]);
        let answer = http(self.addr, "POST", "/connect", Some(session), Some(&form)).await;
        assert_eq!(answer.status, 303, "{}", answer.body);
        let location = answer.header("location").expect("location").to_owned();
        let binding = answer
            .set_cookies()
            .into_iter()
            .filter_map(|c| c.split(';').next())
            .find(|c| c.starts_with("sallyport_console_connect_"))
            .expect("the binding cookie")
            .to_owned();
        (answer, location, binding)
    }

    /// Delivers the provider's redirect `url` to the console as the browser would.
    async fn deliver(&self, url: &str, cookies: &str) -> Answer {
        let path = url
            .strip_prefix(&format!("http://{}", self.addr))
            .unwrap_or_else(|| panic!("the redirect goes to the console: {url}"));
        http(self.addr, "GET", path, Some(cookies), None).await
    }
}

/// Neither the page nor any header of `answers` holds a value of `secrets`, as is, base64
/// or percent-encoded.
fn assert_no_secret(answers: &[&Answer], secrets: &[String]) {
    assert!(
        secrets.len() >= 4,
        "the tap saw the code, the verifier and the tokens: {}",
        secrets.len()
    );
    for answer in answers {
        let headers: String = answer
            .headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect();
        let text = format!("{headers}\n{}", answer.body);
        for secret in secrets {
            let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
            let pct = urlencode(&[("x", secret)]);
            assert!(
                !text.contains(secret.as_str())
                    && !text.contains(&b64)
                    && !text.contains(&pct[2..]),
                "a secret leaked into an answer: {text}"
            );
        }
    }
}

fn query_param(url: &str, name: &str) -> String {
    let parsed = reqwest::Url::parse(url).expect("url");
    parsed
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("no {name} in {url}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_finishes_once_and_a_second_delivery_is_refused_with_the_grant_intact() {
    let rig = rig().await;
    let (session, csrf) = login_at(rig.addr, LOGIN).await;
    let page = http(rig.addr, "GET", "/connect", Some(&session), None).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Connect an account"), "{}", page.body);
    assert!(page.body.contains("name=\"subject\""), "{}", page.body);
    // The page's forms may go to the provider: its redirect is a form's.
    let csp = page.header("content-security-policy").expect("csp");
    assert!(
        csp.contains(&format!("form-action 'self' {}", rig.provider.issuer())),
        "{csp}"
    );

    let (started, authorization_url, binding) = rig.start(&session, &csrf, "alice").await;
    // The binding cookie goes back to the callback only, on the provider's top-level
    // redirect too (Lax), never to a script.
    let set = started
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("sallyport_console_connect_"))
        .expect("binding cookie")
        .to_owned();
    assert!(
        set.ends_with("; Max-Age=600; Path=/connect/callback; HttpOnly; SameSite=Lax"),
        "{set}"
    );
    assert_eq!(
        query_param(&authorization_url, "redirect_uri"),
        format!("http://{}/connect/callback", rig.addr)
    );
    assert!(authorization_url.starts_with(&format!("{}/auth?", rig.provider.issuer())));
    let redirect = rig.provider.browse(&authorization_url, None).await;
    let cookies = format!("{session}; {binding}");
    let done = rig.deliver(&redirect, &cookies).await;
    assert_eq!(done.status, 303, "{}", done.body);
    let location = done.header("location").expect("location").to_owned();
    assert!(location.starts_with("/connect?done="), "{location}");
    let shown = http(rig.addr, "GET", &location, Some(&session), None).await;
    assert_eq!(shown.status, 200);
    assert!(
        shown
            .body
            .contains("Connected <strong>github</strong> for <strong>alice</strong>"),
        "{}",
        shown.body
    );
    assert!(
        shown.body.contains("<code>api:read</code>"),
        "{}",
        shown.body
    );
    assert!(
        shown.body.contains("Access token expires"),
        "{}",
        shown.body
    );
    assert_eq!(rig.subjects().await, ["alice"]);
    let key = GrantKey::for_subject("github", "alice");
    let version = rig.grants().current(&key).await.expect("grant").version();

    // The same redirect again (a reload, a replay): refused, the grant as it was.
    let again = rig.deliver(&redirect, &cookies).await;
    assert_eq!(again.status, 400, "{}", again.body);
    assert!(
        again.body.contains("unknown, expired or already finished"),
        "{}",
        again.body
    );
    assert_eq!(
        rig.grants().current(&key).await.expect("grant").version(),
        version
    );
    assert_eq!(
        rig.call_as("alice").await,
        (Status::Completed, Some("alice".to_owned()))
    );
    assert_eq!(rig.api.accepted(), 1);

    let secrets = rig.canaries().await;
    assert_no_secret(&[&page, &started, &done, &shown, &again], &secrets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_with_a_wrong_state_or_from_another_browser_stores_nothing() {
    let rig = rig().await;
    let (session, csrf) = login_at(rig.addr, LOGIN).await;
    let (_, authorization_url, binding) = rig.start(&session, &csrf, "alice").await;
    let redirect = rig.provider.browse(&authorization_url, None).await;
    let state = query_param(&redirect, "state");
    let cookies = format!("{session}; {binding}");

    // A state this console never sent.
    let forged = redirect.replace(&state, "forged-state-0123456789abcdef");
    let wrong = rig.deliver(&forged, &cookies).await;
    assert_eq!(wrong.status, 400, "{}", wrong.body);
    assert!(wrong.body.contains("unknown, expired or already finished"));
    // No state at all.
    let code = query_param(&redirect, "code");
    let bare = http(
        rig.addr,
        "GET",
        &format!("/connect/callback?code={code}"),
        Some(&cookies),
        None,
    )
    .await;
    assert_eq!(bare.status, 400, "{}", bare.body);
    // The right state from a browser without the binding cookie (the session alone is not
    // enough: it did not start the connect there).
    let other = rig.deliver(&redirect, &session).await;
    assert_eq!(other.status, 403, "{}", other.body);
    assert!(
        other.body.contains("started in another browser"),
        "{}",
        other.body
    );
    assert!(rig.subjects().await.is_empty(), "nothing stored");
    assert_eq!(rig.call_as("alice").await.0, Status::Rejected);
    assert_eq!(rig.api.requests(), 0);

    // The connect is still there for its own browser.
    let done = rig.deliver(&redirect, &cookies).await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(rig.subjects().await, ["alice"]);

    let secrets = rig.canaries().await;
    assert_no_secret(&[&wrong, &bare, &other, &done], &secrets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_connects_in_flight_in_one_browser_finish_each_with_its_own_subjects_grant() {
    let rig = rig().await;
    let (session, csrf) = login_at(rig.addr, LOGIN).await;
    let (_, alice_url, alice_binding) = rig.start(&session, &csrf, "alice").await;
    let (_, bob_url, bob_binding) = rig.start(&session, &csrf, "bob").await;
    assert_ne!(
        alice_binding.split('=').next(),
        bob_binding.split('=').next(),
        "one cookie per connect"
    );
    // The browser holds both cookies; the later connect finishes first.
    let cookies = format!("{session}; {alice_binding}; {bob_binding}");
    let bob = rig.provider.browse(&bob_url, None).await;
    let alice = rig.provider.browse(&alice_url, None).await;
    assert_eq!(rig.deliver(&bob, &cookies).await.status, 303);
    assert_eq!(rig.deliver(&alice, &cookies).await.status, 303);
    assert_eq!(rig.subjects().await, ["alice", "bob"]);
    // Each subject's call goes out with the token of the account that subject connected.
    assert_eq!(
        rig.call_as("bob").await,
        (Status::Completed, Some("bob".to_owned()))
    );
    assert_eq!(
        rig.call_as("alice").await,
        (Status::Completed, Some("alice".to_owned()))
    );
    assert_eq!(rig.api.accepted(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_refusal_is_shown_escaped_and_nothing_is_stored() {
    let rig = rig().await;
    let (session, csrf) = login_at(rig.addr, LOGIN).await;
    // The test provider refuses the account `refuse` (`login_hint`): `access_denied`,
    // with a description holding a newline and markup.
    let (_, authorization_url, binding) = rig.start(&session, &csrf, "refuse").await;
    let redirect = rig.provider.browse(&authorization_url, None).await;
    assert_eq!(query_param(&redirect, "error"), "access_denied");
    let refused = rig
        .deliver(&redirect, &format!("{session}; {binding}"))
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("<h1>Not connected</h1>"),
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains("<code>access_denied</code>"),
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains("&lt;b&gt;no&lt;/b&gt;"),
        "{}",
        refused.body
    );
    assert!(!refused.body.contains("<b>no</b>"), "{}", refused.body);
    assert!(
        refused.body.contains("Nothing was stored."),
        "{}",
        refused.body
    );
    assert!(rig.subjects().await.is_empty());
    // The binding cookie is cleared; the same redirect again finds no connect.
    assert!(
        refused
            .set_cookies()
            .iter()
            .any(|c| c.starts_with("sallyport_console_connect_") && c.contains("Max-Age=0")),
        "{:?}",
        refused.set_cookies()
    );
    let again = rig
        .deliver(&redirect, &format!("{session}; {binding}"))
        .await;
    assert_eq!(again.status, 400);
    assert!(rig.subjects().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_needs_the_form_token_a_known_account_a_subject_and_a_live_session() {
    let rig = rig().await;
    let (session, csrf) = login_at(rig.addr, LOGIN).await;
    let post = |form: Vec<(&'static str, String)>, cookie: Option<String>| {
        let addr = rig.addr;
        async move {
            let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
            http(
                addr,
                "POST",
                "/connect",
                cookie.as_deref(),
                Some(&urlencode(&pairs)),
            )
            .await
        }
    };
    let no_csrf = post(
        vec![("credential", "github".into()), ("subject", "alice".into())],
        Some(session.clone()),
    )
    .await;
    assert_eq!(no_csrf.status, 403, "{}", no_csrf.body);
    let unknown = post(
        vec![
            ("csrf", csrf.clone()),
            ("credential", "gitlab".into()),
            ("subject", "alice".into()),
        ],
        Some(session.clone()),
    )
    .await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    assert!(unknown.body.contains("No such account"));
    let no_subject = post(
        vec![
            ("csrf", csrf.clone()),
            ("credential", "github".into()),
            ("subject", "  ".into()),
        ],
        Some(session.clone()),
    )
    .await;
    assert_eq!(no_subject.status, 400, "{}", no_subject.body);
    assert!(no_subject.body.contains("Whose account?"));
    let signed_out = post(
        vec![
            ("csrf", csrf.clone()),
            ("credential", "github".into()),
            ("subject", "alice".into()),
        ],
        None,
    )
    .await;
    assert_eq!(signed_out.status, 401);
    for refused in [&no_csrf, &unknown, &no_subject, &signed_out] {
        assert!(refused.header("location").is_none());
    }
    assert_eq!(rig.provider.count("token"), 0);

    // Started, then the person logs out: the redirect finishes nothing.
    let (_, authorization_url, binding) = rig.start(&session, &csrf, "alice").await;
    let redirect = rig.provider.browse(&authorization_url, None).await;
    let logout = http(
        rig.addr,
        "POST",
        "/logout",
        Some(&session),
        Some(&urlencode(&[("csrf", &csrf)])),
    )
    .await;
    assert_eq!(logout.status, 303);
    let ended = rig
        .deliver(&redirect, &format!("{session}; {binding}"))
        .await;
    assert_eq!(ended.status, 403, "{}", ended.body);
    assert!(
        ended
            .body
            .contains("session that started this connect has ended")
    );
    assert!(rig.subjects().await.is_empty());
    assert_eq!(rig.provider.tokens_issued("authorization_code"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_connector_the_page_is_not_linked_and_its_routes_answer_404() {
    let rig = crate::common::rig().await;
    let (session, csrf) = rig.login().await;
    let approvals = rig.get("/approvals", Some(&session)).await;
    assert_eq!(approvals.status, 200);
    assert!(!approvals.body.contains("/connect"), "{}", approvals.body);
    assert_eq!(rig.get("/connect", Some(&session)).await.status, 404);
    assert_eq!(
        rig.get("/connect/callback?state=x&code=y", Some(&session))
            .await
            .status,
        404
    );
    let post = rig
        .post(
            "/connect",
            Some(&session),
            &[("csrf", &csrf), ("credential", "github")],
        )
        .await;
    assert_eq!(post.status, 404);
}

/// The browser run: sign in, open "Connect an account", connect alice's account at the
/// provider and come back connected; then alice's call goes out with her token. A refused
/// connect shows the provider's error as text. Screenshots go to `target/console-e2e/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_connects_alices_account_in_a_real_browser_and_her_call_goes_out_with_her_token() {
    let rig = rig().await;
    let driver = chromedriver().await;
    let profile = tempfile::tempdir().expect("profile dir");
    let browser = browser_session(&driver, profile.path()).await;
    let result = drive(&browser, &rig).await;
    let _ = browser.close().await;
    let pages = result.expect("the browser run");

    assert_eq!(rig.subjects().await, ["alice"]);
    assert_eq!(
        rig.call_as("alice").await,
        (Status::Completed, Some("alice".to_owned()))
    );
    assert_eq!(rig.api.accepted(), 1, "the API saw alice's token");
    assert_eq!(rig.api.unauthorized(), 0);
    // Bob never connected: his call is refused, nothing sent.
    assert_eq!(rig.call_as("bob").await.0, Status::Rejected);
    assert_eq!(rig.api.requests(), 1);

    let secrets = rig.canaries().await;
    assert!(secrets.len() >= 4, "{}", secrets.len());
    // One code exchanged (the refused connect had none); `canaries` waited for its event.
    assert_eq!(rig.provider.tokens_issued("authorization_code"), 1);
    for page in &pages {
        for secret in &secrets {
            assert!(
                !page.contains(secret.as_str()),
                "a secret on a page: {page}"
            );
        }
    }
}

async fn drive(
    browser: &fantoccini::Client,
    rig: &Rig,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let base = format!("http://{}", rig.addr);
    let mut pages = Vec::new();
    browser.goto(&format!("{base}/connect")).await?;
    assert_eq!(browser.current_url().await?.path(), "/login");
    browser
        .find(Locator::Css("#token"))
        .await?
        .send_keys(LOGIN)
        .await?;
    browser
        .find(Locator::Css("form.card button[type=submit]"))
        .await?
        .click()
        .await?;
    browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("nav"))
        .await?;
    browser
        .find(Locator::LinkText("Connect an account"))
        .await?
        .click()
        .await?;
    let field = browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Id("subject-github"))
        .await?;
    assert_eq!(browser.current_url().await?.path(), "/connect");
    let dir = target_dir();
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("connect.png"), browser.screenshot().await?)?;
    pages.push(browser.source().await?);

    field.send_keys("alice").await?;
    browser
        .find(Locator::Css("form.connect button[type=submit]"))
        .await?
        .click()
        .await?;
    // To the provider and back.
    let flash = browser
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("section.connected p.flash"))
        .await?;
    assert_eq!(flash.text().await?, "Connected github for alice");
    let url = browser.current_url().await?;
    assert_eq!(url.path(), "/connect");
    assert!(url.query().is_some_and(|q| q.starts_with("done=")), "{url}");
    let section = browser
        .find(Locator::Css("section.connected"))
        .await?
        .text()
        .await?;
    assert!(section.contains("api:read"), "{section}");
    assert!(section.contains("refreshed when needed"), "{section}");
    std::fs::write(dir.join("connected.png"), browser.screenshot().await?)?;
    // The same page on a phone-sized window.
    browser.set_window_size(390, 1000).await?;
    std::fs::write(dir.join("connected-phone.png"), browser.screenshot().await?)?;
    browser.set_window_size(1100, 1400).await?;
    pages.push(browser.source().await?);

    // A refused connect: the provider's error, as text.
    let field = browser.find(Locator::Id("subject-github")).await?;
    field.send_keys("refuse").await?;
    browser
        .find(Locator::Css("form.connect button[type=submit]"))
        .await?
        .click()
        .await?;
    let alert = browser
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("p.error"))
        .await?;
    assert!(
        alert.text().await?.contains("refused"),
        "{}",
        alert.text().await?
    );
    let main = browser.find(Locator::Css("main")).await?.text().await?;
    assert!(main.contains("access_denied"), "{main}");
    assert!(
        main.contains("<b>no</b>"),
        "the provider's markup shown as text: {main}"
    );
    std::fs::write(dir.join("connect-refused.png"), browser.screenshot().await?)?;
    pages.push(browser.source().await?);
    Ok(pages)
}
