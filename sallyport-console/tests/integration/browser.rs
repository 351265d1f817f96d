//! End to end in a real headless Chromium, driven through chromedriver (WebDriver) with
//! fantoccini: the agent's call is parked by a real executor against the local upstream, a
//! person opens the console, logs in, sees the pending approval with its real host and
//! objects, approves it, and sees the call completed, with exactly one request at the
//! upstream. The pending page's screenshot is saved under `target/console-e2e/`.
//!
//! A second run reads what an approver must see: every header of the request with its value
//! (never the API key the vault attaches), the agent's bidi and tag characters as visible
//! escapes on the card and in the call page's audit JSON, denied and expired cards that say
//! the request was never sent, and the confirmation step of an irreversible action as the
//! page's only form. Each page's screenshot is saved there too.
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
pub(crate) struct Driver {
    child: tokio::process::Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

pub(crate) async fn chromedriver() -> Driver {
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

pub(crate) fn target_dir() -> PathBuf {
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
    let browser = session(&driver, profile.path()).await;

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

/// A headless Chromium session through `driver`, with its profile in `profile`.
pub(crate) async fn session(driver: &Driver, profile: &Path) -> fantoccini::Client {
    let caps = json!({
        "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1100,1400",
                format!("--user-data-dir={}", profile.display()),
            ],
        }
    });
    let serde_json::Value::Object(caps) = caps else {
        unreachable!("an object")
    };
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a Chromium session through chromedriver")
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

/// What the agent wrote as its reason: a right-to-left override, an isolate and tag
/// characters (invisible), which would reverse or hide text where a page shows them raw.
const HOSTILE_REASON: &str = "refund for \u{202e}fdp.exe\u{2066} \u{e0041}\u{e0042}\u{e007f}ok";

/// The same, as every page must show it.
const SHOWN_REASON: &str = "refund for \\u{202e}fdp.exe\\u{2066} \\u{e0041}\\u{e0042}\\u{e007f}ok";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_reads_every_header_and_the_audit_json_escaped_in_a_real_browser() {
    use crate::approver_view::{
        API_KEY, assert_no_key, header_executor, header_rig, park_refund, shown_request,
    };

    let rig = header_rig().await;
    let hasty = header_executor(
        &rig._dir.path().join("journal.db"),
        std::sync::Arc::clone(&rig.vault),
        Duration::from_millis(50),
    );
    let (lapsed, _) = park_refund(&hasty, 3, "this one will expire").await;
    tokio::time::sleep(Duration::from_millis(120)).await;
    let (approve, _) = park_refund(&rig.executor, 1, HOSTILE_REASON).await;
    let (deny, _) = park_refund(&rig.executor, 2, "a second refund").await;
    let irreversible = crate::confirm::rig().await;
    let parked = irreversible
        .executor
        .call(
            "delete_customer",
            json!({"customer_id": "cus_9"}),
            &sallyport_tests::approvals_rig::session(),
        )
        .await;
    let delete = parked.approval_id.expect("approval id");

    let driver = chromedriver().await;
    let profile = tempfile::tempdir().expect("profile dir");
    let browser = session(&driver, profile.path()).await;
    let result = async {
        let dir = target_dir();
        std::fs::create_dir_all(&dir)?;
        log_in(&browser, &rig.url()).await?;

        // The pending card: every header with its value, the reason escaped.
        let card = browser
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Id(approve.as_str()))
            .await?;
        let text = card.text().await?;
        assert!(text.contains(&shown_request(&rig, 1)), "{text}");
        assert!(text.contains(SHOWN_REASON), "{text}");
        let source = browser.source().await?;
        assert!(!source.contains('\u{202e}') && !source.contains('\u{e0041}'));
        assert_no_key("the approvals page", &source);
        std::fs::write(
            dir.join("approvals-pending.png"),
            browser.screenshot().await?,
        )?;

        // Deny one, approve the other.
        let card = browser.find(Locator::Id(deny.as_str())).await?;
        card.find(Locator::Css("textarea"))
            .await?
            .send_keys("not this customer")
            .await?;
        card.find(Locator::Css("button.deny"))
            .await?
            .click()
            .await?;
        browser
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("p.flash"))
            .await?;
        let denied = browser
            .find(Locator::Id(deny.as_str()))
            .await?
            .text()
            .await?;
        assert!(denied.contains("Request (never sent: denied)"), "{denied}");
        assert!(!denied.contains("as approved"), "{denied}");
        std::fs::write(dir.join("approval-denied.png"), browser.screenshot().await?)?;

        browser
            .goto(&format!("{}/approvals/{}", rig.url(), approve.as_str()))
            .await?;
        let card = browser.find(Locator::Id(approve.as_str())).await?;
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

        // The call's page: its audit JSON shows the escapes, never the raw characters.
        browser
            .find(Locator::Css("section.result a"))
            .await?
            .click()
            .await?;
        let json = browser
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("pre.json"))
            .await?
            .text()
            .await?;
        assert!(
            json.contains(&format!("\"note\": \"{SHOWN_REASON}\"")),
            "{json}"
        );
        assert!(!json.contains('\u{202e}'), "{json}");
        let source = browser.source().await?;
        for c in [
            '\u{202e}',
            '\u{2066}',
            '\u{e0041}',
            '\u{e0042}',
            '\u{e007f}',
        ] {
            assert!(!source.contains(c), "raw {c:?} on the call page");
        }
        assert_no_key("the call page", &source);
        std::fs::write(dir.join("call.png"), browser.screenshot().await?)?;

        // The expired card, in the list with the others.
        browser
            .goto(&format!("{}/approvals/{}", rig.url(), lapsed.as_str()))
            .await?;
        let expired = browser
            .find(Locator::Id(lapsed.as_str()))
            .await?
            .text()
            .await?;
        assert!(
            expired.contains("Request (never sent: it expired)"),
            "{expired}"
        );
        std::fs::write(
            dir.join("approval-expired.png"),
            browser.screenshot().await?,
        )?;
        browser.goto(&format!("{}/approvals", rig.url())).await?;
        std::fs::write(
            dir.join("approvals-decided.png"),
            browser.screenshot().await?,
        )?;

        // The confirmation step of an irreversible action: one form, no second reason box.
        log_in(&browser, &irreversible.url()).await?;
        let card = browser
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Id(delete.as_str()))
            .await?;
        card.find(Locator::Css("textarea"))
            .await?
            .send_keys("GDPR erasure")
            .await?;
        card.find(Locator::Css("button.approve"))
            .await?
            .click()
            .await?;
        browser
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("form.decide input[name=confirm]"))
            .await?;
        assert_eq!(
            browser.find_all(Locator::Css("form.decide")).await?.len(),
            1
        );
        assert!(browser.find_all(Locator::Css("textarea")).await?.is_empty());
        assert!(
            browser
                .find_all(Locator::Css("button.deny"))
                .await?
                .is_empty()
        );
        std::fs::write(dir.join("confirm.png"), browser.screenshot().await?)?;
        browser
            .find(Locator::Css("form.decide button.approve"))
            .await?
            .click()
            .await?;
        let flash = browser
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("p.flash"))
            .await?;
        assert_eq!(flash.text().await?, "Your decision is recorded.");
        Ok::<(), Box<dyn std::error::Error>>(())
    }
    .await;
    let _ = browser.close().await;
    result.expect("the browser run");

    // One refund sent, with the key the vault attached; one deletion; nothing else.
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(
        rig.upstream.received()[0].header("x-api-key"),
        Some(API_KEY)
    );
    assert_eq!(
        irreversible
            .upstream
            .received()
            .iter()
            .filter(|r| r.method == "DELETE")
            .count(),
        1
    );
}

/// Logs in at the console at `base` through its form.
async fn log_in(
    browser: &fantoccini::Client,
    base: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    browser.goto(&format!("{base}/login")).await?;
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
    // Signed in: the navigation is there.
    browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("nav[aria-label=Sections]"))
        .await?;
    assert_eq!(browser.current_url().await?.path(), "/approvals");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_reads_what_an_answer_carried_in_a_real_browser() {
    use crate::findings::{ROWS, assert_no_value, findings_rig};

    let rig = findings_rig().await;
    let driver = chromedriver().await;
    let profile = tempfile::tempdir().expect("profile dir");
    let browser = session(&driver, profile.path()).await;
    let result = async {
        log_in(&browser, &rig.url()).await?;
        browser
            .goto(&format!("{}/calls/{}", rig.url(), rig.receipt))
            .await?;
        let table = browser
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("table.findings"))
            .await?;
        let mut shown = Vec::new();
        for row in table.find_all(Locator::Css("tbody tr")).await? {
            let mut cells = Vec::new();
            for cell in row.find_all(Locator::Css("td")).await? {
                cells.push(cell.text().await?);
            }
            shown.push(cells);
        }
        let want: Vec<Vec<String>> = ROWS
            .iter()
            .map(|row| row.iter().map(|c| (*c).to_owned()).collect())
            .collect();
        assert_eq!(shown, want);
        assert_no_value(&browser.source().await?);
        let dir = target_dir();
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("call-findings.png"), browser.screenshot().await?)?;
        Ok::<_, Box<dyn std::error::Error>>(())
    }
    .await;
    let _ = browser.close().await;
    result.expect("the browser run");
}
