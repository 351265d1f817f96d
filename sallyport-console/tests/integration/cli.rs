//! `sallyport console` (the CLI, in process) over a journal file a real executor parked a
//! call in: a person logs in with the token from `--token-file`, approves, and the decision
//! is recorded as `--user` through channel `console` — and nothing is sent, since the plain
//! CLI has no executor; the executor that holds the action then sends it once.

use crate::common;

use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use sallyport_core::approval::{ApprovalId, ApprovalState, Decider};
use sallyport_tests::oidc::{CONSOLE_LOGIN_CLIENT, OidcProvider};

use common::{http, login_at, rig, urlencode};

/// Approves `id` through the console at `addr` as the session `cookie` (with its `csrf`):
/// the answer is a redirect and the stored approval is approved; its decider.
async fn approve(
    rig: &common::Rig,
    addr: SocketAddr,
    cookie: &str,
    csrf: &str,
    id: &ApprovalId,
) -> Decider {
    let form = urlencode(&[("csrf", csrf), ("verdict", "approve")]);
    let path = format!("/approvals/{}/decide", id.as_str());
    let answer = http(addr, "POST", &path, Some(cookie), Some(&form)).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let stored = rig
        .store()
        .approval(id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.state, ApprovalState::Approved);
    stored.decision.expect("decision").decider
}

/// `sallyport --journal JOURNAL console --listen 127.0.0.1:PORT ARGS…` in process on a
/// free port (it serves until the process ends), once it listens.
async fn serve(journal: &Path, args: &[&OsStr]) -> SocketAddr {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    serve_at(journal, port, args).await
}

/// [`serve`] on `port`.
async fn serve_at(journal: &Path, port: u16, args: &[&OsStr]) -> SocketAddr {
    let listen = format!("127.0.0.1:{port}");
    let mut argv: Vec<OsString> = vec![
        "sallyport".into(),
        "--journal".into(),
        journal.into(),
        "console".into(),
        "--listen".into(),
        listen.clone().into(),
    ];
    argv.extend(args.iter().map(|a| a.to_os_string()));
    std::thread::spawn(move || sallyport_cli::run(argv));
    let addr: SocketAddr = listen.parse().expect("addr");
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return addr;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the CLI console listens on {addr}");
}

const CLI_TOKEN: &str = "cli-console-token-for-carol-2b9e";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_console_records_a_decision_and_the_executor_carries_it_out() {
    let rig = rig().await;
    let id = rig.park(11, "month-end").await;
    let journal = rig._dir.path().join("journal.db");
    let token_file = rig._dir.path().join("console-token");
    std::fs::write(&token_file, format!("{CLI_TOKEN}\n")).expect("token file");

    // A non-loopback address without TLS is refused before anything is served.
    let refused = sallyport_cli::run([
        "sallyport".as_ref(),
        "--journal".as_ref(),
        journal.as_os_str(),
        "console".as_ref(),
        "--listen".as_ref(),
        "0.0.0.0:0".as_ref(),
    ]);
    assert_eq!(refused, std::process::ExitCode::from(2));

    let addr = serve(
        &journal,
        &[
            "--user".as_ref(),
            "carol".as_ref(),
            "--token-file".as_ref(),
            token_file.as_os_str(),
        ],
    )
    .await;

    let (cookie, csrf) = login_at(addr, CLI_TOKEN).await;
    let page = http(addr, "GET", "/approvals", Some(&cookie), None).await;
    assert!(
        page.body.contains("cannot carry calls out"),
        "{}",
        page.body
    );
    assert!(page.body.contains("cus_11"), "{}", page.body);
    let decider = approve(&rig, addr, &cookie, &csrf, &id).await;
    assert_eq!(decider.by, "carol");
    assert_eq!(decider.channel, "console");
    assert_eq!(rig.posts(), 0, "the plain CLI sends nothing");
    assert_eq!(
        rig.executor.resume_approvals().await.expect("resume").len(),
        1
    );
    assert_eq!(rig.posts(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_token_under_32_bytes_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("dir");
    let journal = dir.path().join("journal.db");
    let token_file = dir.path().join("console-token");
    // 31 bytes: one short.
    std::fs::write(&token_file, format!("{}\n", "k".repeat(31))).expect("token file");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let code = sallyport_cli::run([
        "sallyport".as_ref(),
        "--journal".as_ref(),
        journal.as_os_str(),
        "console".as_ref(),
        "--listen".as_ref(),
        listen.as_ref(),
        "--token-file".as_ref(),
        token_file.as_os_str(),
    ]);
    assert_eq!(
        code,
        std::process::ExitCode::from(2),
        "refused as a usage error"
    );
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err(),
        "nothing listens"
    );
    // The same file with one more byte starts (the error is the length, nothing else).
    let error = sallyport_console::LoginToken::from_file(&token_file).expect_err("short");
    assert_eq!(
        error.to_string(),
        "a console login token has at least 32 bytes and this one has 31: use a generated one (64 hex digits), e.g. `openssl rand -hex 32`"
    );
    std::fs::write(&token_file, format!("{}\n", "k".repeat(32))).expect("token file");
    assert!(sallyport_console::LoginToken::from_file(&token_file).is_ok());
}

/// `sallyport console --oidc-issuer …`: approvers sign in at the real provider, and the
/// decision records who they are (subject, name, groups), with no shared token printed or
/// accepted. A configuration missing a part, or a client secret file with an empty first
/// line, is refused before anything is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_console_signs_approvers_in_with_openid_connect_and_records_who_decided() {
    let provider = OidcProvider::start(60).await;
    let rig = rig().await;
    let id = rig.park(12, "quarter-end").await;
    let journal = rig._dir.path().join("journal.db");
    let secret_file = rig._dir.path().join("oidc-client-secret");

    // Refused at start, as usage errors: no --public-url; an empty secret file.
    let base = |extra: &[&str]| {
        let mut argv: Vec<OsString> = vec![
            "sallyport".into(),
            "--journal".into(),
            journal.clone().into(),
            "console".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--oidc-issuer".into(),
            provider.issuer().into(),
            "--oidc-client-id".into(),
            CONSOLE_LOGIN_CLIENT.0.into(),
        ];
        argv.extend(extra.iter().map(OsString::from));
        argv
    };
    assert_eq!(
        sallyport_cli::run(base(&[])),
        std::process::ExitCode::from(2),
        "no --public-url"
    );
    std::fs::write(&secret_file, "\n").expect("secret file");
    let empty = base(&[
        "--public-url",
        "http://127.0.0.1:1",
        "--oidc-client-secret-file",
        secret_file.to_str().expect("path"),
    ]);
    assert_eq!(
        sallyport_cli::run(empty),
        std::process::ExitCode::from(2),
        "an empty client secret"
    );

    std::fs::write(&secret_file, format!("{}\n", CONSOLE_LOGIN_CLIENT.1)).expect("secret file");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let public_url = format!("http://127.0.0.1:{port}");
    let addr = serve_at(
        &journal,
        port,
        &[
            "--oidc-issuer".as_ref(),
            provider.issuer().as_ref(),
            "--oidc-client-id".as_ref(),
            CONSOLE_LOGIN_CLIENT.0.as_ref(),
            "--oidc-client-secret-file".as_ref(),
            secret_file.as_os_str(),
            "--oidc-provider-name".as_ref(),
            "Test ID".as_ref(),
            "--public-url".as_ref(),
            public_url.as_ref(),
        ],
    )
    .await;

    // The login page offers the provider.
    let page = http(addr, "GET", "/login", None, None).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Sign in with Test ID"), "{}", page.body);

    // Sign in at the provider as alice.
    let start = http(addr, "GET", "/login/oidc", None, None).await;
    assert_eq!(start.status, 303, "{}", start.body);
    let location = start.header("location").expect("location").to_owned();
    assert!(
        location.starts_with(&format!("{}/auth?", provider.issuer())),
        "{location}"
    );
    let binding = start
        .set_cookies()
        .into_iter()
        .filter_map(|c| c.split(';').next())
        .find(|c| c.starts_with("sallyport_console_oidc_"))
        .expect("a binding cookie")
        .to_owned();
    let redirect = provider.browse(&location, None).await;
    let back = redirect
        .strip_prefix(&public_url)
        .unwrap_or_else(|| panic!("the provider redirected to {redirect}"))
        .to_owned();
    let done = http(addr, "GET", &back, Some(&binding), None).await;
    assert_eq!(done.status, 200, "{}", done.body);
    let session = done.cookie("sallyport_console").expect("a session");
    let approvals = http(addr, "GET", "/approvals", Some(&session), None).await;
    assert!(
        approvals
            .body
            .contains("Signed in as <strong>Alice Approver</strong>"),
        "{}",
        approvals.body
    );
    assert!(!approvals.body.contains(CONSOLE_LOGIN_CLIENT.1));

    // Alice approves: the decision names her as the provider does.
    let csrf = approvals.csrf().expect("csrf");
    let decider = approve(&rig, addr, &session, &csrf, &id).await;
    assert_eq!(decider.by, "alice");
    assert_eq!(decider.name.as_deref(), Some("Alice Approver"));
    assert_eq!(decider.groups, ["approvers"]);
    assert_eq!(decider.channel, "console");
}
