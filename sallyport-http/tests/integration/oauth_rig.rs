//! What the OAuth tests share: three actions that bind the OAuth credential `api`, an
//! executor over a real SQLite journal with a vault the test fills, and a check that no
//! secret of the credential appears in a result or the journal.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::ActionResult;
use sallyport_core::vault::{Grant, GrantKey, GrantStore, Vault};
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::{HttpChannel, HttpChannelBuilder};
use sallyport_tests::http_server::journal_text;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Read one item.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_item", effect = observe, credential = "api")]
#[http(get = "/v1/items/{item_id}", result = Item)]
pub(crate) struct GetItem {
    item_id: String,
}

/// Send one item; never resent after it left.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "send_item", effect = external_commitment, reconcile = "get_item",
         credential = "api")]
#[http(post = "/v1/items/{item_id}/send", result = Item)]
pub(crate) struct SendItem {
    item_id: String,
}

/// Create one item; the upstream honours the idempotency key.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_item", effect = external_commitment, retry = idempotency_key,
         reconcile = "get_item", credential = "api")]
#[http(post = "/v1/items", result = Item)]
pub(crate) struct CreateItem {
    item_id: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
pub(crate) struct Item {
    id: String,
    state: String,
}

pub(crate) struct OAuthRig {
    pub(crate) executor: Executor,
    pub(crate) journal: PathBuf,
    pub(crate) vault: Arc<dyn Vault>,
    /// Every secret value that must never appear in a result or the journal.
    pub(crate) canaries: std::sync::Mutex<Vec<String>>,
    _dir: tempfile::TempDir,
}

/// An executor for the three actions with `vault`, consent that approves after `consent_wait`.
pub(crate) fn oauth_rig(
    vault: Arc<dyn Vault>,
    configure: impl FnOnce(HttpChannelBuilder) -> HttpChannelBuilder,
    consent_wait: Duration,
) -> OAuthRig {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let catalog = Catalog::builder()
        .action::<GetItem>()
        .action::<SendItem>()
        .action::<CreateItem>()
        .build()
        .expect("catalog");
    let channel = configure(
        HttpChannel::builder().backoff(Duration::from_millis(10), Duration::from_millis(40)),
    )
    .build()
    .expect("channel");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(&journal).expect("journal"))
        .vault_arc(Arc::clone(&vault))
        .consent(FnConsent::new(move |_| async move {
            tokio::time::sleep(consent_wait).await;
            ConsentDecision::Approve
        }))
        .channel(channel)
        .build()
        .expect("executor");
    OAuthRig {
        executor,
        journal,
        vault,
        canaries: std::sync::Mutex::new(Vec::new()),
        _dir: dir,
    }
}

impl OAuthRig {
    /// Calls `action` and checks that no canary leaked into the result or the journal.
    pub(crate) async fn call(&self, action: &str, args: Value) -> ActionResult {
        let session = Session::new("s1");
        let result = self.executor.call(action, args, &session).await;
        self.assert_no_secret(&result.to_json());
        self.assert_no_secret(&journal_text(&self.journal));
        result
    }

    /// Adds the grant's current tokens to the canaries.
    pub(crate) async fn learn_tokens(&self) {
        let grant = self.grant().await;
        let mut canaries = self.canaries.lock().expect("canaries");
        for secret in grant.secrets() {
            canaries.push(secret.to_owned());
        }
    }

    pub(crate) fn add_canary(&self, secret: &str) {
        self.canaries
            .lock()
            .expect("canaries")
            .push(secret.to_owned());
    }

    pub(crate) fn assert_no_secret(&self, text: &str) {
        let b64 = base64::engine::general_purpose::STANDARD;
        for secret in self.canaries.lock().expect("canaries").iter() {
            for form in [secret.clone(), b64.encode(secret)] {
                assert!(!text.contains(&form), "a secret leaked in: {text}");
            }
        }
    }

    pub(crate) fn store(&self) -> Arc<dyn GrantStore> {
        self.vault.grants().expect("the vault keeps grants")
    }

    pub(crate) async fn grant(&self) -> Grant {
        self.store()
            .current(&GrantKey::shared("api"))
            .await
            .expect("grant")
    }
}
