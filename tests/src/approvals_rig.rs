//! The host the approval tests run in several processes: one catalog (send an invoice, read
//! one), a vault whose credential is bound to the local upstream, an executor with deferred
//! consent over a SQLite journal file. The test process and the `approvals-host` child
//! processes build it alike, so they hold the same actions with the same definitions.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sallyport_core::approval::ConsentMode;
use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::HttpChannel;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The credential the actions bind.
pub const CREDENTIAL: &str = "billing-api";
/// Its value (a canary: it must never appear in a result, a record or an approval).
pub const TOKEN: &str = "billing-token-approvals-5d1c";

/// The vault credential holding the approval webhook's shared secret.
pub const WEBHOOK_CREDENTIAL: &str = "approvals-webhook";
/// Its value.
pub const WEBHOOK_SECRET: &str = "webhook-shared-secret-0b7e41c9d2";

/// Send one invoice to a customer. The upstream honours the executor's idempotency key.
#[derive(Debug, Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "send_invoice", effect = external_commitment, retry = idempotency_key,
         reconcile = "get_invoice", credential = "billing-api", consent = per_call,
         data = [financial])]
#[http(post = "/v1/invoices", result = Invoice)]
pub struct SendInvoice {
    /// The customer.
    #[scope(customer)]
    pub customer_id: String,
    /// The invoice.
    pub invoice_id: String,
    /// Why the agent wants this.
    #[audit_note]
    pub reason: String,
}

/// Read one invoice.
#[derive(Debug, Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe, credential = "billing-api")]
#[http(get = "/v1/invoices/{invoice_id}", result = Invoice)]
pub struct GetInvoice {
    /// The invoice.
    pub invoice_id: String,
}

/// An invoice as the upstream answers.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct Invoice {
    /// The id the upstream gave.
    pub id: String,
}

/// How a host is built.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// The journal file.
    pub journal: PathBuf,
    /// The upstream's base URL (the credential's binding).
    pub upstream: String,
    /// Build `send_invoice` with another description, so its definition hash differs.
    pub changed_definition: bool,
    /// How long a claim on an approved call lasts.
    pub lease: Duration,
    /// How long a parked call waits.
    pub expiry: Duration,
    /// Check `GET /v1/customers/{id}` on the upstream before sending (a read-only
    /// precondition, for the tests that stop a process inside it).
    pub precheck: bool,
    /// Blocking consent approved at once through the danger door instead of deferred
    /// consent: `send_invoice` is sent directly (the reconciler tests crash it mid-send).
    pub auto_approve: bool,
    /// How many distinct approvers `send_invoice` needs (1: today's single approval).
    pub approvals: u32,
    /// A Cedar decision policy file: who may decide which approvals.
    pub decision_policy: Option<PathBuf>,
}

impl HostOptions {
    /// Defaults: same definition, 60 s lease, 24 h expiry, no precondition.
    pub fn new(journal: impl Into<PathBuf>, upstream: impl Into<String>) -> Self {
        Self {
            journal: journal.into(),
            upstream: upstream.into(),
            changed_definition: false,
            lease: Duration::from_secs(60),
            expiry: Duration::from_secs(24 * 3600),
            precheck: false,
            auto_approve: false,
            approvals: 1,
            decision_policy: None,
        }
    }
}

/// The vault: one bearer credential bound to `upstream`.
pub fn vault(upstream: &str) -> Arc<MemoryVault> {
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(CREDENTIAL, CredentialKind::Bearer, Binding::url(upstream)),
        Secret::new(TOKEN),
    );
    vault.set(
        CredentialMeta::new(
            WEBHOOK_CREDENTIAL,
            CredentialKind::Bearer,
            Binding::url("https://webhook.invalid"),
        ),
        Secret::new(WEBHOOK_SECRET),
    );
    vault
}

/// The catalog, with `send_invoice`'s definition changed when asked.
pub fn catalog(options: &HostOptions) -> Catalog {
    let changed = options.changed_definition;
    let mut builder = Catalog::builder()
        .action::<GetInvoice>()
        .action_with_spec::<SendInvoice>(move |spec| {
            if changed {
                spec.with_description("Send one invoice to a customer, now also emailing it.")
            } else {
                spec
            }
        });
    if options.precheck {
        let base = options.upstream.clone();
        builder = builder.precondition::<SendInvoice, _, _>(move |input| {
            let base = base.clone();
            async move { customer_exists(&base, &input.customer_id).await }
        });
    }
    builder.build().expect("catalog")
}

/// A deferred-consent executor for `options`, with `vault`.
pub fn executor(options: &HostOptions, vault: Arc<MemoryVault>) -> Executor {
    let journal = SqliteJournal::open(&options.journal).expect("journal");
    executor_on(options, vault, Arc::new(journal))
}

/// [`executor`] over another journal (a PostgreSQL one); `options.journal` is not opened.
pub fn executor_on(
    options: &HostOptions,
    vault: Arc<MemoryVault>,
    journal: Arc<dyn sallyport_core::journal::Journal>,
) -> Executor {
    let channel = HttpChannel::builder()
        .backoff(Duration::from_millis(5), Duration::from_millis(10))
        .build()
        .expect("channel");
    let builder = Executor::builder(catalog(options))
        .journal_arc(journal)
        .channel(channel)
        .vault_arc(vault);
    let builder = if options.auto_approve {
        builder.dangerous().auto_approve_consent().done()
    } else {
        builder.consent_mode(ConsentMode::Deferred)
    };
    let mut builder = builder
        .approval_lease(options.lease)
        .approval_expiry(options.expiry);
    if options.approvals != 1 {
        builder = builder.approvals_required_for("send_invoice", options.approvals);
    }
    if let Some(path) = &options.decision_policy {
        let policy =
            sallyport_cedar::CedarDecisionPolicy::from_file(path).expect("decision policy");
        builder = builder.decision_policy(Arc::new(policy));
    }
    builder.build().expect("executor")
}

/// The agent's session: any customer.
pub fn session() -> Session {
    Session::new("agent-1")
        .requested_by("billing-bot")
        .allow_any("customer")
}

/// The arguments of invoice number `n`.
pub fn invoice(n: usize) -> Value {
    json!({
        "customer_id": format!("cus_{n}"),
        "invoice_id": format!("inv_{n}"),
        "reason": format!("month-end invoice {n} for the customer"),
    })
}

/// `GET {base}/v1/customers/{id}` over plain HTTP/1.1: `Ok` for a 2xx answer.
async fn customer_exists(base: &str, id: &str) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|_| "customer check failed".to_owned())?;
    let request = format!(
        "GET /v1/customers/{id} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|_| "customer check failed".to_owned())?;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let head = String::from_utf8_lossy(&answer);
    if head.starts_with("HTTP/1.1 2") {
        Ok(())
    } else {
        Err("customer check did not answer 2xx".to_owned())
    }
}
