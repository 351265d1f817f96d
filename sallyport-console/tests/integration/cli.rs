//! `sallyport console` (the CLI, in process) over a journal file a real executor parked a
//! call in: a person logs in with the token from `--token-file`, approves, and the decision
//! is recorded as `--user` through channel `console` — and nothing is sent, since the plain
//! CLI has no executor; the executor that holds the action then sends it once.

use crate::common;

use std::time::Duration;

use sallyport_core::approval::ApprovalState;

use common::{http, login_at, rig, urlencode};

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

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let args: Vec<std::ffi::OsString> = vec![
        "sallyport".into(),
        "--journal".into(),
        journal.clone().into(),
        "console".into(),
        "--listen".into(),
        listen.clone().into(),
        "--user".into(),
        "carol".into(),
        "--token-file".into(),
        token_file.into(),
    ];
    // It serves until the process ends.
    std::thread::spawn(move || sallyport_cli::run(args));
    let addr: std::net::SocketAddr = listen.parse().expect("addr");
    let mut up = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "the CLI console listens on {addr}");

    let (cookie, csrf) = login_at(addr, CLI_TOKEN).await;
    let page = http(addr, "GET", "/approvals", Some(&cookie), None).await;
    assert!(
        page.body.contains("cannot carry calls out"),
        "{}",
        page.body
    );
    assert!(page.body.contains("cus_11"), "{}", page.body);
    let form = urlencode(&[("csrf", &csrf), ("verdict", "approve")]);
    let path = format!("/approvals/{}/decide", id.as_str());
    let answer = http(addr, "POST", &path, Some(&cookie), Some(&form)).await;
    assert_eq!(answer.status, 303, "{}", answer.body);

    let stored = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.state, ApprovalState::Approved);
    let decision = stored.decision.expect("decision");
    assert_eq!(decision.decider.by, "carol");
    assert_eq!(decision.decider.channel, "console");
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
