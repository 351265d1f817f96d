//! Approvers sign in with OpenID Connect at the real provider (`oidc-provider`, started by
//! `sallyport_tests::oidc`), and their decisions record who they are.
//!
//! - In a real headless Chromium: sign in through the provider's redirects, land signed in
//!   as "Alice Approver", approve, and find her subject, name, groups and channel in the
//!   approval and in its audit record; then log out. Screenshots of the login page, the
//!   signed-in approvals page and the decided approval are saved under
//!   `target/console-e2e/oidc-*.png`.
//! - Over HTTP, with this test's tracing captured: a callback without the state, with
//!   another state, from another browser, delivered twice, refused by the provider, naming
//!   another issuer, or with a code the provider refuses signs nobody in; the one good callback does; logout ends
//!   it; and neither the client secret, the PKCE verifier, the codes nor the nonce appear in
//!   any page or log line.
//! - The shared-token login still works beside it, says it is for one-person setups, and
//!   records what it always did.
//!
//! The ID token's own checks (signature, issuer, audience, expiry, nonce) are unit tests of
//! `src/oidc.rs`, with tokens signed there.

use crate::browser::{chromedriver, session, target_dir};
use crate::common::{self, Answer, LOGIN, Rig, Sink, login_at, rig_at};

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine as _;
use fantoccini::Locator;
use sallyport_console::{BuildError, Console, OidcLogin};
use sallyport_core::Executor;
use sallyport_core::approval::{ApprovalState, Decider};
use sallyport_tests::oidc::{CONSOLE_LOGIN_CLIENT, OidcProvider};

/// The console signing in at `provider`, as the client `console-login`.
fn login(provider: &OidcProvider, addr: SocketAddr) -> OidcLogin {
    OidcLogin::new(
        provider.issuer(),
        CONSOLE_LOGIN_CLIENT.0,
        format!("http://{addr}"),
    )
    .client_secret(CONSOLE_LOGIN_CLIENT.1)
    .provider_name("Test ID")
}

async fn oidc_rig(provider: &OidcProvider, token: bool) -> Rig {
    rig_at(
        |executor: &Executor, addr| {
            Console::builder(executor.clone()).oidc_login(login(provider, addr))
        },
        token,
    )
    .await
}

/// `name=value` of the sign-in's binding cookie the answer sets.
fn binding(answer: &Answer) -> String {
    answer
        .set_cookies()
        .into_iter()
        .filter_map(|c| c.split(';').next())
        .find(|c| c.starts_with("sallyport_console_oidc_"))
        .expect("a binding cookie")
        .to_owned()
}

fn param(url: &str, name: &str) -> Option<String> {
    reqwest::Url::parse(url)
        .expect("URL")
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Starts a sign-in: the provider's authorization URL and the binding cookie.
async fn start(rig: &Rig) -> (String, String) {
    let answer = rig.get("/login/oidc", None).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let location = answer.header("location").expect("location").to_owned();
    let set = answer
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("sallyport_console_oidc_"))
        .expect("binding cookie");
    assert!(
        set.contains("Path=/login/oidc/callback")
            && set.contains("HttpOnly")
            && set.contains("SameSite=Lax"),
        "{set}"
    );
    (location, binding(&answer))
}

/// The console path (with its query) of the provider's redirect back.
fn local(rig: &Rig, redirect: &str) -> String {
    redirect
        .strip_prefix(&rig.url())
        .unwrap_or_else(|| panic!("the provider redirected to {redirect}"))
        .to_owned()
}

fn signed_in(answer: &Answer) -> bool {
    answer.cookie("sallyport_console").is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alice_signs_in_at_the_provider_in_chromium_approves_and_her_name_is_in_the_audit_record() {
    let provider = OidcProvider::start(60).await;
    let rig = oidc_rig(&provider, true).await;
    let id = rig.park(38, "invoice for the team approvals").await;

    let driver = chromedriver().await;
    let profile = tempfile::tempdir().expect("profile dir");
    let browser = session(&driver, profile.path()).await;
    let result = drive(&browser, &rig, id.as_str()).await;
    let _ = browser.close().await;
    result.expect("the browser run");

    assert_eq!(rig.posts(), 1, "the approved call went out once");
    let stored = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.state, ApprovalState::Finished);
    let decider = stored.decision.expect("decision").decider;
    assert_eq!(
        decider,
        Decider::new("alice", "console")
            .with_name("Alice Approver")
            .with_groups(["approvers"])
    );
    let records = rig.journal().records().await.expect("records");
    let notes: Vec<_> = records
        .iter()
        .filter_map(|r| r.event.approval.as_ref())
        .filter(|n| n.approval_id == id && n.by.is_some())
        .collect();
    assert_eq!(notes.len(), 1, "one decision record: {notes:?}");
    let note = notes[0];
    assert_eq!(note.by.as_deref(), Some("alice"));
    assert_eq!(note.name.as_deref(), Some("Alice Approver"));
    assert_eq!(note.groups, ["approvers"]);
    assert_eq!(note.channel.as_deref(), Some("console"));
}

async fn drive(
    browser: &fantoccini::Client,
    rig: &Rig,
    id: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    browser.goto(&format!("{}/approvals", rig.url())).await?;
    assert_eq!(browser.current_url().await?.path(), "/login");
    let page = browser.find(Locator::Css("main")).await?.text().await?;
    assert!(
        page.contains("This is the single shared login, meant for a console one person uses"),
        "{page}"
    );
    let dir = target_dir();
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("oidc-login.png"), browser.screenshot().await?)?;
    let button = browser.find(Locator::Css(".signin a.button")).await?;
    assert_eq!(button.text().await?, "Sign in with Test ID");
    button.click().await?;

    // Through the provider (it approves alice at once) and back, on to the approvals.
    let card = browser
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Id(id))
        .await?;
    assert_eq!(browser.current_url().await?.path(), "/approvals");
    let user = browser
        .find(Locator::Css("span.user"))
        .await?
        .text()
        .await?;
    assert_eq!(user, "Signed in as Alice Approver");
    std::fs::write(dir.join("oidc-signed-in.png"), browser.screenshot().await?)?;

    card.find(Locator::Css("textarea"))
        .await?
        .send_keys("ok for the team")
        .await?;
    card.find(Locator::Css("button.approve"))
        .await?
        .click()
        .await?;
    let flash = browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("p.flash"))
        .await?;
    assert_eq!(flash.text().await?, "Your decision is recorded.");
    // The decided card names the approver by subject and display name.
    let decision = browser
        .find(Locator::Css("section.decision p"))
        .await?
        .text()
        .await?;
    assert!(
        decision.starts_with("Approved by alice (Alice Approver) through console"),
        "{decision}"
    );
    std::fs::write(dir.join("oidc-decided.png"), browser.screenshot().await?)?;

    // Logging out ends the session.
    browser
        .find(Locator::Css("form.logout button"))
        .await?
        .click()
        .await?;
    for _ in 0..100 {
        if browser.current_url().await?.path() == "/login" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(browser.current_url().await?.path(), "/login");
    browser.goto(&format!("{}/approvals", rig.url())).await?;
    assert_eq!(browser.current_url().await?.path(), "/login");
    Ok(())
}

#[tokio::test]
async fn a_sign_in_is_refused_without_its_state_browser_or_code_once_only_and_no_secret_shows() {
    let sink = Sink::default();
    let writer = sink.clone();
    let _capture = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    );
    let provider = OidcProvider::start(60).await;
    let rig = oidc_rig(&provider, true).await;
    let mut answers: Vec<Answer> = Vec::new();
    let mut secrets: Vec<String> = vec![CONSOLE_LOGIN_CLIENT.1.to_owned()];

    let page = rig.get("/login", None).await;
    assert!(page.body.contains("Sign in with Test ID"), "{}", page.body);
    assert!(page.body.contains("href=\"/login/oidc\""));
    answers.push(page);

    // The authorization request: code + PKCE S256, state and nonce, this console's
    // redirect URI.
    let (url, cookie) = start(&rig).await;
    assert!(
        url.starts_with(&format!("{}/auth?", provider.issuer())),
        "{url}"
    );
    assert_eq!(param(&url, "response_type").as_deref(), Some("code"));
    assert_eq!(
        param(&url, "client_id").as_deref(),
        Some(CONSOLE_LOGIN_CLIENT.0)
    );
    assert_eq!(
        param(&url, "redirect_uri"),
        Some(format!("{}/login/oidc/callback", rig.url()))
    );
    assert_eq!(
        param(&url, "scope").as_deref(),
        Some("openid profile groups")
    );
    assert_eq!(
        param(&url, "code_challenge_method").as_deref(),
        Some("S256")
    );
    let state = param(&url, "state").expect("state");
    let nonce = param(&url, "nonce").expect("nonce");
    assert!(state.len() >= 43 && nonce.len() >= 43 && state != nonce);
    secrets.push(nonce);

    let redirect = provider.browse(&url, None).await;
    let back = local(&rig, &redirect);
    let code = param(&redirect, "code").expect("code");
    assert_eq!(param(&redirect, "state"), Some(state.clone()));
    secrets.push(code.clone());

    // No state, another state, another browser: refused, nobody signed in, and the
    // sign-in stays for its own browser.
    let without_state = rig
        .get(&format!("/login/oidc/callback?code={code}"), Some(&cookie))
        .await;
    assert_eq!(without_state.status, 400, "{}", without_state.body);
    assert!(without_state.body.contains("no sign-in state"));
    let other_state = rig
        .get(
            &format!("/login/oidc/callback?code={code}&state=not-{state}"),
            Some(&cookie),
        )
        .await;
    assert_eq!(other_state.status, 400);
    assert!(
        other_state
            .body
            .contains("unknown, expired or already finished")
    );
    let other_browser = rig.get(&back, None).await;
    assert_eq!(other_browser.status, 403);
    assert!(other_browser.body.contains("another browser"));
    let twice_state = rig
        .get(
            &format!("/login/oidc/callback?code={code}&state={state}&state={state}"),
            Some(&cookie),
        )
        .await;
    assert_eq!(twice_state.status, 400);
    for answer in [&without_state, &other_state, &other_browser, &twice_state] {
        assert!(!signed_in(answer), "{answer:?}");
        assert!(answer.body.contains("Nobody was signed in"));
    }
    answers.extend([without_state, other_state, other_browser, twice_state]);

    // The callback itself: signed in as Alice Approver.
    let done = rig.get(&back, Some(&cookie)).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.body
            .contains("Signed in as <strong>Alice Approver</strong>")
    );
    assert_eq!(done.header("refresh"), Some("0; url=/approvals"));
    let session = done.cookie("sallyport_console").expect("a session");
    assert!(
        done.set_cookies().iter().any(|c| c
            .starts_with(&format!("{}=;", cookie.split('=').next().unwrap_or("")))
            && c.contains("Max-Age=0")),
        "the binding cookie is cleared: {:?}",
        done.set_cookies()
    );
    let approvals = rig.get("/approvals", Some(&session)).await;
    assert_eq!(approvals.status, 200);
    assert!(
        approvals
            .body
            .contains("Signed in as <strong>Alice Approver</strong>")
    );
    let csrf = approvals.csrf().expect("csrf");
    answers.extend([done, approvals]);

    // Delivered again (a replay): the sign-in is used up.
    let replay = rig.get(&back, Some(&cookie)).await;
    assert_eq!(replay.status, 400);
    assert!(replay.body.contains("already finished"));
    assert!(!signed_in(&replay));
    answers.push(replay);

    // The provider refuses (the account `refuse`): its error is shown, nobody signed in.
    let (url, cookie) = start(&rig).await;
    let redirect = provider.browse(&url, Some("refuse")).await;
    assert_eq!(param(&redirect, "error").as_deref(), Some("access_denied"));
    let refused = rig.get(&local(&rig, &redirect), Some(&cookie)).await;
    assert_eq!(refused.status, 403);
    assert!(
        refused
            .body
            .contains("The provider refused the sign-in (access_denied)"),
        "{}",
        refused.body
    );
    assert!(!signed_in(&refused));
    answers.push(refused);

    // A code the provider does not know: refused at the token endpoint.
    let (url, cookie) = start(&rig).await;
    let redirect = provider.browse(&url, None).await;
    let real = param(&redirect, "code").expect("code");
    secrets.push(real.clone());
    let forged = local(&rig, &redirect).replace(&real, &format!("x{real}"));
    let bad_code = rig.get(&forged, Some(&cookie)).await;
    assert_eq!(bad_code.status, 403, "{}", bad_code.body);
    assert!(
        bad_code.body.contains("The provider refused the code"),
        "{}",
        bad_code.body
    );
    assert!(!signed_in(&bad_code));
    answers.push(bad_code);

    // A redirect naming another issuer (a mix-up, RFC 9207): refused before the exchange.
    let (url, cookie) = start(&rig).await;
    let redirect = provider.browse(&url, None).await;
    let issuer = param(&redirect, "iss").expect("the provider names itself (RFC 9207)");
    assert_eq!(issuer, provider.issuer());
    secrets.push(param(&redirect, "code").expect("code"));
    let mut mixed = reqwest::Url::parse(&redirect).expect("URL");
    let kept: Vec<(String, String)> = mixed
        .query_pairs()
        .into_owned()
        .filter(|(k, _)| k != "iss")
        .collect();
    mixed
        .query_pairs_mut()
        .clear()
        .extend_pairs(kept)
        .append_pair("iss", "http://127.0.0.1:1/other");
    let mix_up = rig.get(&local(&rig, mixed.as_str()), Some(&cookie)).await;
    assert_eq!(mix_up.status, 403, "{}", mix_up.body);
    assert!(
        mix_up.body.contains("names another issuer"),
        "{}",
        mix_up.body
    );
    assert!(!signed_in(&mix_up));
    answers.push(mix_up);

    // Logout ends the OpenID session.
    let out = rig
        .post("/logout", Some(&session), &[("csrf", csrf.as_str())])
        .await;
    assert_eq!(out.status, 303);
    assert_eq!(out.header("location"), Some("/login"));
    let after = rig.get("/approvals", Some(&session)).await;
    assert_eq!(after.status, 303);
    assert_eq!(after.header("location"), Some("/login"));

    // The PKCE verifier the provider received (its events arrive through its stdout).
    let mut verifiers: Vec<String> = Vec::new();
    for _ in 0..100 {
        verifiers = provider
            .events()
            .iter()
            .filter_map(|e| e["code_verifier"].as_str().map(str::to_owned))
            .collect();
        if !verifiers.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(verifiers.len(), 1, "one code exchanged: {verifiers:?}");
    secrets.extend(verifiers);

    let log = sink.text();
    assert!(
        log.contains("console sign-in") && log.contains("Alice Approver"),
        "the log was captured: {log}"
    );
    for secret in &secrets {
        for answer in &answers {
            assert!(
                !answer.body.contains(secret.as_str()),
                "a page shows a secret"
            );
            for (name, value) in &answer.headers {
                assert!(
                    !value.contains(secret.as_str()),
                    "header {name} carries a secret"
                );
            }
        }
        assert!(
            !log.contains(secret.as_str()),
            "a log line carries a secret"
        );
        let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
        assert!(!log.contains(&b64), "a log line carries a secret in base64");
    }
}

#[tokio::test]
async fn the_shared_token_login_still_works_says_it_is_for_one_person_and_decides_as_before() {
    let provider = OidcProvider::start(60).await;
    let rig = oidc_rig(&provider, true).await;
    let page = rig.get("/login", None).await;
    assert!(page.body.contains("Sign in with Test ID"));
    assert!(page.body.contains("id=\"token\""));
    assert!(
        page.body
            .contains("This is the single shared login, meant for a console one person uses"),
        "{}",
        page.body
    );
    let id = rig.park(39, "shared token decision").await;
    let (cookie, csrf) = login_at(rig.addr, LOGIN).await;
    let decided = rig
        .post(
            &format!("/approvals/{}/decide", id.as_str()),
            Some(&cookie),
            &[("csrf", csrf.as_str()), ("verdict", "approve")],
        )
        .await;
    assert_eq!(decided.status, 303, "{}", decided.body);
    let stored = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(
        stored.decision.expect("decision").decider,
        Decider::new("alice", "console"),
        "a token session records its user only, as before"
    );

    // A console with a token and no OpenID Connect: no sign-in button, the same note.
    let plain = common::rig().await;
    let page = plain.get("/login", None).await;
    assert!(!page.body.contains("Sign in with"));
    assert!(page.body.contains("single shared login"));
    assert_eq!(plain.get("/login/oidc", None).await.status, 404);
}

#[tokio::test]
async fn a_console_may_sign_in_with_openid_connect_only_and_refuses_an_unusable_configuration() {
    let provider = OidcProvider::start(60).await;
    let rig = oidc_rig(&provider, false).await;
    let page = rig.get("/login", None).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Sign in with Test ID"));
    assert!(
        !page.body.contains("id=\"token\""),
        "no token form without a token"
    );
    assert!(!page.body.contains("single shared login"));

    let journal = || -> std::sync::Arc<dyn sallyport_core::journal::ApprovalStore> {
        std::sync::Arc::new(sallyport_core::journal::MemoryJournal::new())
    };
    assert!(matches!(
        Console::journal_only(journal()).build(),
        Err(BuildError::NoUser)
    ));
    // The issuer over plain HTTP to a non-loopback host: refused at build, nothing served.
    let err = Console::journal_only(journal())
        .oidc_login(OidcLogin::new(
            "http://id.example.com",
            "console",
            "https://console.example.com",
        ))
        .build()
        .expect_err("refused");
    assert!(matches!(err, BuildError::Oidc(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "the console's OpenID Connect login cannot be used: the OpenID issuer is neither https:// nor http:// on a loopback address"
    );
}
