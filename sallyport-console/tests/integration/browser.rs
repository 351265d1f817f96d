//! End to end in a real headless Chromium, driven through chromedriver (WebDriver) with
//! fantoccini: the agent's call is parked by a real executor against the local upstream, a
//! person opens the console, logs in, sees the pending approval with its real host and
//! objects, approves it, and sees the call completed, with exactly one request at the
//! upstream. The pending page's screenshot is saved under `target/console-e2e/`.
//!
//! Needs `chromium` and `chromium-driver` (Debian); `tests/run.sh` installs them. Without them
//! the test fails, it does not skip.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{ClientBuilder, Locator};
use sallyport_core::approval::ApprovalState;
use serde_json::json;

use common::{LOGIN, rig};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// chromedriver on a free port, killed on drop.
struct Driver {
    child: tokio::process::Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn chromedriver() -> Driver {
    for tool in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: install Debian's `chromium` and `chromium-driver` (apt-get install -y chromium chromium-driver)"
        );
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let child = tokio::process::Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start chromedriver");
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Driver { child, port };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chromedriver did not listen on {port} within 10 s");
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("console-e2e")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_approves_a_parked_call_in_a_real_browser_and_one_request_is_sent() {
    let rig = rig().await;
    let id = rig
        .park(42, "month-end invoice for ACME, <b>as agreed</b>")
        .await;
    assert_eq!(rig.posts(), 0);

    let driver = chromedriver().await;
    let profile = tempfile::tempdir().expect("profile dir");
    let caps = json!({
        "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1100,1400",
                format!("--user-data-dir={}", profile.path().display()),
            ],
        }
    });
    let serde_json::Value::Object(caps) = caps else {
        unreachable!("an object")
    };
    let browser = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a Chromium session through chromedriver");

    let result = drive(&browser, &rig, id.as_str()).await;
    let _ = browser.close().await;
    result.expect("the browser run");

    assert_eq!(rig.posts(), 1, "exactly one request at the upstream");
    let stored = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.state, ApprovalState::Finished);
    let decision = stored.decision.expect("decision");
    assert_eq!(decision.decider.by, "alice");
    assert_eq!(decision.decider.channel, "console");
}

async fn drive(
    browser: &fantoccini::Client,
    rig: &common::Rig,
    id: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    // Opening the console without a session lands on the login page.
    browser.goto(&format!("{}/approvals", rig.url())).await?;
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

    // The pending approval, with its real host and objects.
    let card = browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Id(id))
        .await?;
    assert_eq!(browser.current_url().await?.path(), "/approvals");
    let text = card.text().await?;
    let host = rig.upstream.url();
    assert!(text.contains(&format!("POST {host}/v1/invoices")), "{text}");
    assert!(text.contains("cus_42"), "{text}");
    assert!(
        text.contains("<b>as agreed</b>"),
        "the agent's words shown as text: {text}"
    );
    assert!(text.contains("its own words"), "{text}");
    assert!(text.contains("Signed in") || browser.source().await?.contains("Signed in as"));

    let dir = target_dir();
    std::fs::create_dir_all(&dir)?;
    let png = browser.screenshot().await?;
    std::fs::write(dir.join("pending.png"), &png)?;
    // The same page on a phone-sized window.
    browser.set_window_size(390, 1400).await?;
    std::fs::write(dir.join("pending-phone.png"), browser.screenshot().await?)?;
    browser.set_window_size(1100, 1400).await?;

    // Approve with a reason.
    card.find(Locator::Css("textarea"))
        .await?
        .send_keys("checked with finance")
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
    let page = browser.find(Locator::Id(id)).await?.text().await?;
    assert!(page.contains("completed"), "{page}");
    assert!(page.contains("Approved by alice through console"), "{page}");
    assert!(page.contains("checked with finance"), "{page}");
    let png = browser.screenshot().await?;
    std::fs::write(dir.join("decided.png"), &png)?;
    Ok(())
}
