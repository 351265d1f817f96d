//! The console's router over a real listener (`Console::serve` on 127.0.0.1:0), deciding
//! approvals parked by a real executor in a real SQLite journal file, with a local upstream
//! that counts the requests it receives.

use crate::common;

use sallyport_console::Console;
use sallyport_core::approval::{ApprovalState, Verdict};
use sallyport_core::journal::Phase;
use sallyport_tests::approvals_rig::TOKEN;

use common::{LOGIN, rig, rig_with};

fn assert_security_headers(answer: &common::Answer) {
    let csp = answer.header("content-security-policy").expect("CSP");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("script-src"), "no script is allowed: {csp}");
    assert_eq!(answer.header("x-frame-options"), Some("DENY"));
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_session_pages_redirect_to_login_and_posts_are_refused() {
    let rig = rig().await;
    let id = rig.park(1, "month-end").await;
    for path in [
        "/approvals",
        "/calls",
        "/chain",
        "/chain/export",
        "/",
        &format!("/approvals/{}", id.as_str()),
    ] {
        let answer = rig.get(path, None).await;
        assert_eq!(answer.status, 303, "{path}");
        let to = if path == "/" { "/approvals" } else { "/login" };
        assert_eq!(answer.header("location"), Some(to), "{path}");
        assert!(!answer.body.contains("cus_1"), "{path}: {}", answer.body);
        assert_security_headers(&answer);
    }
    let decide = format!("/approvals/{}/decide", id.as_str());
    let answer = rig
        .post(&decide, None, &[("verdict", "approve"), ("csrf", "x")])
        .await;
    assert_eq!(answer.status, 401);
    // A made-up session cookie is no session.
    let answer = rig
        .post(
            &decide,
            Some("sallyport_console=00ff"),
            &[("verdict", "approve")],
        )
        .await;
    assert_eq!(answer.status, 401);
    let a = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(a.state, ApprovalState::Awaiting);
    assert_eq!(rig.posts(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_takes_the_token_and_sets_a_strict_http_only_cookie() {
    let rig = rig().await;
    let page = rig.get("/login", None).await;
    assert_eq!(page.status, 200);
    assert_security_headers(&page);
    assert!(page.body.contains("<label for=\"token\">"), "{}", page.body);
    let nonce_cookie = page
        .cookie("sallyport_console_login")
        .expect("login cookie");
    let nonce = page.csrf().expect("nonce");

    // A wrong token: back to the login page, no session.
    let wrong = rig
        .post(
            "/login",
            Some(&nonce_cookie),
            &[("csrf", &nonce), ("token", "not-the-console-login-token")],
        )
        .await;
    assert_eq!(wrong.status, 303);
    assert_eq!(wrong.header("location"), Some("/login?failed=1"));
    assert!(wrong.cookie("sallyport_console").is_none());
    // The right token without the login form's nonce: refused.
    let forged = rig.post("/login", None, &[("token", LOGIN)]).await;
    assert_eq!(forged.status, 403);
    assert!(forged.cookie("sallyport_console").is_none());

    let ok = rig
        .post(
            "/login",
            Some(&nonce_cookie),
            &[("csrf", &nonce), ("token", LOGIN)],
        )
        .await;
    assert_eq!(ok.status, 303);
    let set = ok
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("sallyport_console="))
        .expect("session cookie")
        .to_owned();
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    assert!(!set.contains("Secure"), "not over TLS: {set}");
    let cookie = ok.cookie("sallyport_console").expect("cookie");
    let page = rig.get("/approvals", Some(&cookie)).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("Signed in as <strong>alice</strong>"),
        "{}",
        page.body
    );
    assert!(!page.body.contains(LOGIN), "the token is never rendered");

    // Log out: the cookie no longer opens a page.
    let csrf = page.csrf().expect("csrf");
    let out = rig.post("/logout", Some(&cookie), &[("csrf", &csrf)]).await;
    assert_eq!(out.status, 303);
    assert_eq!(rig.get("/approvals", Some(&cookie)).await.status, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_tls_the_cookie_is_secure() {
    let rig = rig_with(|e| Console::builder(e.clone()).behind_tls(true)).await;
    let page = rig.get("/login", None).await;
    let nonce_cookie = page
        .cookie("sallyport_console_login")
        .expect("login cookie");
    let nonce = page.csrf().expect("nonce");
    let ok = rig
        .post(
            "/login",
            Some(&nonce_cookie),
            &[("csrf", &nonce), ("token", LOGIN)],
        )
        .await;
    let set = ok
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("sallyport_console="))
        .expect("session cookie")
        .to_owned();
    assert!(
        set.contains("Secure") && set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_without_the_csrf_token_changes_nothing() {
    let rig = rig().await;
    let id = rig.park(2, "month-end").await;
    let (cookie, csrf) = rig.login().await;
    let records_before = rig.journal().records().await.expect("records").len();
    let decide = format!("/approvals/{}/decide", id.as_str());
    let (other_cookie, other_csrf) = rig.login().await;
    assert_ne!(csrf, other_csrf);
    for form in [
        vec![("verdict", "approve")],
        vec![("verdict", "approve"), ("csrf", "")],
        vec![("verdict", "approve"), ("csrf", "0000")],
        // Another session's token is not this session's.
        vec![("verdict", "approve"), ("csrf", other_csrf.as_str())],
    ] {
        let answer = rig.post(&decide, Some(&cookie), &form).await;
        assert_eq!(answer.status, 403, "{form:?}");
        assert_security_headers(&answer);
    }
    let answer = rig.post("/logout", Some(&other_cookie), &[]).await;
    assert_eq!(answer.status, 403);
    assert_eq!(
        rig.get("/approvals", Some(&other_cookie)).await.status,
        200,
        "still logged in"
    );
    let a = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(a.state, ApprovalState::Awaiting);
    assert!(a.decision.is_none());
    assert_eq!(
        rig.journal().records().await.expect("records").len(),
        records_before
    );
    assert_eq!(rig.posts(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_decided_twice_is_executed_once_and_audited_with_the_console_user() {
    let rig = rig().await;
    let id = rig.park(3, "month-end").await;
    let (cookie, csrf) = rig.login().await;
    let decide = format!("/approvals/{}/decide", id.as_str());
    let form = [
        ("csrf", csrf.as_str()),
        ("verdict", "approve"),
        ("reason", "ticket OPS-812"),
    ];
    // Two deliveries at once (a double click, two tabs), then a third after.
    let (a, b) = tokio::join!(
        rig.post(&decide, Some(&cookie), &form),
        rig.post(&decide, Some(&cookie), &form)
    );
    let c = rig.post(&decide, Some(&cookie), &form).await;
    let mut outcomes: Vec<_> = [&a, &b, &c]
        .iter()
        .map(|r| {
            assert_eq!(r.status, 303, "{}", r.body);
            r.header("location").expect("location").to_owned()
        })
        .collect();
    outcomes.sort();
    let page = format!("/approvals/{}", id.as_str());
    assert_eq!(
        outcomes,
        [
            format!("{page}?done=already"),
            format!("{page}?done=already"),
            format!("{page}?done=recorded")
        ]
    );
    assert_eq!(rig.posts(), 1, "one request reached the upstream");

    let stored = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.state, ApprovalState::Finished);
    let decision = stored.decision.as_ref().expect("decision");
    assert_eq!(decision.verdict, Verdict::Approve);
    assert_eq!(decision.decider.by, "alice");
    assert_eq!(decision.decider.channel, "console");
    assert_eq!(decision.reason.as_deref(), Some("ticket OPS-812"));
    let records = rig.journal().records().await.expect("records");
    let decided: Vec<_> = records
        .iter()
        .filter(|r| r.event.phase == Phase::Decided)
        .collect();
    assert_eq!(decided.len(), 1, "one decision in the chain");
    let note = decided[0].event.approval.as_ref().expect("note");
    assert_eq!(note.by.as_deref(), Some("alice"));
    assert_eq!(note.channel.as_deref(), Some("console"));
    assert!(rig.journal().verify().await.expect("verify").is_intact());

    // The approval's page shows who, when, through which channel, and the result.
    let shown = rig
        .get(&format!("{page}?done=recorded"), Some(&cookie))
        .await;
    assert_eq!(shown.status, 200);
    for needle in [
        "Your decision is recorded.",
        "Approved",
        "alice",
        "through console",
        "completed",
        "Receipt",
    ] {
        assert!(shown.body.contains(needle), "{needle}: {}", shown.body);
    }
    assert!(
        !shown.body.contains("name=\"verdict\""),
        "no form on a decided approval"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_is_recorded_and_nothing_is_sent() {
    let rig = rig().await;
    let id = rig.park(4, "month-end").await;
    let (cookie, csrf) = rig.login().await;
    let decide = format!("/approvals/{}/decide", id.as_str());
    let answer = rig
        .post(
            &decide,
            Some(&cookie),
            &[
                ("csrf", &csrf),
                ("verdict", "deny"),
                ("reason", "wrong customer"),
            ],
        )
        .await;
    assert_eq!(answer.status, 303);
    let stored = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.state, ApprovalState::Denied);
    assert_eq!(
        stored.decision.expect("decision").reason.as_deref(),
        Some("wrong customer")
    );
    assert_eq!(rig.posts(), 0);
    // Neither verdict: refused, nothing more recorded.
    let before = rig.journal().records().await.expect("records").len();
    let answer = rig
        .post(
            &decide,
            Some(&cookie),
            &[("csrf", &csrf), ("verdict", "maybe")],
        )
        .await;
    assert_eq!(answer.status, 400);
    assert_eq!(
        rig.journal().records().await.expect("records").len(),
        before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_reason_with_html_script_and_bidi_renders_inert() {
    let rig = rig().await;
    let evil =
        "<script>alert(1)</script><img src=x onerror=alert(2)> \"quoted\" \u{202e}gnp.exe\u{2066}";
    let id = rig.park(5, evil).await;
    let (cookie, _) = rig.login().await;
    for path in [
        "/approvals".to_owned(),
        format!("/approvals/{}", id.as_str()),
    ] {
        let page = rig.get(&path, Some(&cookie)).await;
        assert_eq!(page.status, 200);
        let body = &page.body;
        assert!(!body.contains("<script"), "{path}: {body}");
        assert!(!body.contains("<img"), "{path}: {body}");
        assert!(
            !body.contains('\u{202e}') && !body.contains('\u{2066}'),
            "{path}: raw bidi"
        );
        assert!(
            body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{path}: {body}"
        );
        assert!(
            body.contains("\\u{202e}gnp.exe\\u{2066}"),
            "{path}: bidi made visible"
        );
        assert!(
            body.contains("its own words"),
            "{path}: marked as the agent's"
        );
        assert!(
            body.contains("<code class=\"data\">financial</code>"),
            "{path}: the data classes on the card"
        );
        // The exact request, with the real host and the objects.
        assert!(
            body.contains(&format!("POST {}/v1/invoices", rig.upstream.url())),
            "{path}: {body}"
        );
        assert!(body.contains("cus_5"), "{path}");
        assert!(
            !body.contains(TOKEN),
            "{path}: the credential is never rendered"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_filter_and_the_chain_verifies_and_exports_without_secrets() {
    let rig = rig().await;
    let id = rig.park(6, "month-end").await;
    let _ = rig.park(7, "second").await;
    let (cookie, csrf) = rig.login().await;
    let answer = rig
        .post(
            &format!("/approvals/{}/decide", id.as_str()),
            Some(&cookie),
            &[("csrf", &csrf), ("verdict", "approve")],
        )
        .await;
    assert_eq!(answer.status, 303);
    assert_eq!(rig.posts(), 1);

    let all = rig.get("/calls", Some(&cookie)).await;
    assert_eq!(all.status, 200);
    assert!(
        all.body.contains("cus_6") && all.body.contains("cus_7"),
        "{}",
        all.body
    );
    let completed = rig
        .get("/calls?status=completed&action=send_invoice", Some(&cookie))
        .await;
    assert!(completed.body.contains("cus_6"), "{}", completed.body);
    assert!(
        !completed.body.contains("cus_7"),
        "only completed calls: {}",
        completed.body
    );
    let none = rig.get("/calls?action=get_invoice", Some(&cookie)).await;
    assert!(none.body.contains("No calls match."), "{}", none.body);

    // The completed call's page shows its audit record.
    let records = rig.journal().records().await.expect("records");
    let done = records
        .iter()
        .find(|r| r.event.status == sallyport_core::Status::Completed)
        .expect("completed record");
    let page = rig
        .get(
            &format!("/calls/{}", done.event.receipt_id.as_str()),
            Some(&cookie),
        )
        .await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(&done.hash), "{}", page.body);
    assert!(
        page.body.contains("Every record of this attempt") || page.body.contains("Audit record")
    );
    assert_eq!(rig.get("/calls/rcp_nope", Some(&cookie)).await.status, 404);

    let chain = rig.get("/chain", Some(&cookie)).await;
    let report = rig.journal().verify().await.expect("verify");
    assert!(chain.body.contains("Intact"), "{}", chain.body);
    assert!(chain.body.contains(&report.head.hash), "{}", chain.body);
    assert!(
        chain.body.contains(&format!("<dd>{}</dd>", report.records)),
        "{}",
        chain.body
    );

    let export = rig.get("/chain/export", Some(&cookie)).await;
    assert_eq!(export.status, 200);
    assert!(
        export
            .header("content-type")
            .expect("type")
            .starts_with("application/x-ndjson")
    );
    let lines: Vec<serde_json::Value> = export
        .body
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), records.len());
    assert_eq!(
        lines.last().expect("last")["hash"],
        report.head.hash.as_str()
    );
    for body in [&all.body, &page.body, &chain.body, &export.body] {
        assert!(!body.contains(TOKEN));
        assert!(!body.contains(LOGIN));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_without_an_executor_records_the_decision_and_sends_nothing() {
    let rig = rig_with(|e| {
        Console::journal_only(std::sync::Arc::clone(
            e.approval_store().expect("an approval store"),
        ))
    })
    .await;
    let id = rig.park(8, "month-end").await;
    let (cookie, csrf) = rig.login().await;
    let page = rig.get("/approvals", Some(&cookie)).await;
    assert!(
        page.body.contains("cannot carry calls out"),
        "{}",
        page.body
    );
    let answer = rig
        .post(
            &format!("/approvals/{}/decide", id.as_str()),
            Some(&cookie),
            &[("csrf", &csrf), ("verdict", "approve")],
        )
        .await;
    assert_eq!(answer.status, 303);
    let stored = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.state, ApprovalState::Approved);
    assert_eq!(rig.posts(), 0, "the console alone sends nothing");
    // The executor that holds the action carries it out.
    let results = rig.executor.resume_approvals().await.expect("resume");
    assert_eq!(results.len(), 1);
    assert_eq!(rig.posts(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_vault_learns_later_is_scrubbed_from_every_page() {
    use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, Secret};
    let rig = rig().await;
    let leaked = "zebra-canary-secret-991";
    let id = rig.park(9, &format!("ticket {leaked} from the user")).await;
    // The executor scrubbed with what the vault knew then; the vault learns it afterwards.
    rig.vault.set(
        CredentialMeta::new(
            "later-credential",
            CredentialKind::Bearer,
            Binding::url("https://later.invalid"),
        ),
        Secret::new(leaked),
    );
    let (cookie, _) = rig.login().await;
    let records = rig.journal().records().await.expect("records");
    let receipt = records
        .last()
        .expect("record")
        .event
        .receipt_id
        .as_str()
        .to_owned();
    for path in [
        "/approvals".to_owned(),
        format!("/approvals/{}", id.as_str()),
        "/calls".to_owned(),
        format!("/calls/{receipt}"),
        "/chain/export".to_owned(),
    ] {
        let page = rig.get(&path, Some(&cookie)).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(!page.body.contains(leaked), "{path}: {}", page.body);
    }
    let page = rig
        .get(&format!("/approvals/{}", id.as_str()), Some(&cookie))
        .await;
    assert!(
        page.body.contains("ticket [REDACTED] from the user"),
        "{}",
        page.body
    );
}

/// Serves a journal-only console over `journal` (user alice) on 127.0.0.1:0.
async fn serve_journal_console(
    journal: std::sync::Arc<dyn sallyport_core::journal::ApprovalStore>,
    key: Option<sallyport_core::journal::HeadVerifyingKey>,
) -> std::net::SocketAddr {
    let mut builder = Console::journal_only(journal).user(
        "alice",
        sallyport_console::LoginToken::new(LOGIN).expect("token"),
    );
    if let Some(key) = key {
        builder = builder.head_key(key);
    }
    let console = builder.build().expect("console");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { console.serve(listener).await });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chain_page_checks_signed_heads_with_the_key_it_is_given() {
    use sallyport_core::journal::{AuditEvent, HeadSigningKey, Intent, Journal, SqliteJournal};
    let dir = tempfile::tempdir().expect("tempdir");
    let signing = HeadSigningKey::generate().expect("key");
    let public = signing.verifying_key();
    let journal = std::sync::Arc::new(
        SqliteJournal::builder(dir.path().join("signed.db"))
            .signing_key(signing)
            .open()
            .expect("journal"),
    );
    for _ in 0..3 {
        let intent = Intent::for_bench(true);
        journal.write_intent(&intent).await.expect("intent");
        journal
            .append(AuditEvent::for_bench(&intent))
            .await
            .expect("append");
    }
    let shared: std::sync::Arc<dyn sallyport_core::journal::ApprovalStore> = journal;

    let checked = serve_journal_console(std::sync::Arc::clone(&shared), Some(public)).await;
    let (cookie, _) = common::login_at(checked, LOGIN).await;
    let page = common::http(checked, "GET", "/chain", Some(&cookie), None).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("signatures checked with key")
            && page.body.contains("signed through record 3"),
        "{}",
        page.body
    );
    assert!(page.body.contains(&public.key_id()), "{}", page.body);

    // Without the key the newest head is shown, marked unchecked.
    let unchecked = serve_journal_console(std::sync::Arc::clone(&shared), None).await;
    let (cookie, _) = common::login_at(unchecked, LOGIN).await;
    let page = common::http(unchecked, "GET", "/chain", Some(&cookie), None).await;
    assert!(
        page.body.contains("newest signed head: record 3") && page.body.contains("not checked"),
        "{}",
        page.body
    );

    // Another key: no head verifies, and the page says so.
    let other = HeadSigningKey::generate().expect("key").verifying_key();
    let wrong = serve_journal_console(shared, Some(other)).await;
    let (cookie, _) = common::login_at(wrong, LOGIN).await;
    let page = common::http(wrong, "GET", "/chain", Some(&cookie), None).await;
    assert!(page.body.contains("no head signed by key"), "{}", page.body);
}
