//! An application that embeds the `sallyport` commands with its own executor
//! (`sallyport_cli::run_with_executor`), as a real process for `tests/tests/cli_approvals.rs`:
//!
//! ```text
//! approvals-app BASE_URL JOURNAL call INVOICE     # the agent's call: parked, prints the result
//! approvals-app BASE_URL JOURNAL approvals …      # the embedded command line
//! ```
//!
//! The executor has deferred consent, one per-call HTTP action `pay_invoice`
//! (`POST /v1/invoices/{invoice_id}/pay`) with its credential bound to `BASE_URL`, and journals
//! into the SQLite file `JOURNAL`.

use std::process::ExitCode;
use std::sync::Arc;

use sallyport_core::approval::ConsentMode;
use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::HttpChannel;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Pay one invoice.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "pay_invoice", effect = external_commitment, consent = per_call,
         reconcile = "get_invoice", credential = "billing-api")]
#[http(post = "/v1/invoices/{invoice_id}/pay", result = Paid)]
#[allow(dead_code, reason = "the generated request builder reads the fields")]
struct PayInvoice {
    #[scope(invoice)]
    invoice_id: String,
    /// Why the agent wants this.
    #[audit_note]
    reason: String,
}

/// Read one invoice.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe, credential = "billing-api")]
#[http(get = "/v1/invoices/{invoice_id}", result = Paid)]
#[allow(dead_code, reason = "the generated request builder reads the fields")]
struct GetInvoice {
    invoice_id: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Paid {
    id: String,
}

fn executor(base_url: &str, journal: &str) -> Result<Executor, Box<dyn std::error::Error>> {
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "billing-api",
            CredentialKind::Bearer,
            Binding::url(base_url),
        ),
        Secret::new("token-approvals-app"),
    );
    Ok(Executor::builder(
        Catalog::builder()
            .action::<PayInvoice>()
            .action::<GetInvoice>()
            .build()?,
    )
    .journal(SqliteJournal::open(journal)?)
    .vault_arc(vault)
    .channel(HttpChannel::builder().build()?)
    .consent_mode(ConsentMode::Deferred)
    .build()?)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(base_url), Some(journal), Some(mode)) = (args.get(1), args.get(2), args.get(3))
    else {
        eprintln!("usage: approvals-app BASE_URL JOURNAL (call INVOICE | approvals …)");
        return ExitCode::from(2);
    };
    let executor = match executor(base_url, journal) {
        Ok(executor) => executor,
        Err(e) => {
            eprintln!("approvals-app: {e}");
            return ExitCode::FAILURE;
        }
    };
    if mode != "call" {
        let cli_args = std::iter::once("approvals-app".to_owned()).chain(args[3..].iter().cloned());
        return sallyport_cli::run_with_executor(cli_args, &executor);
    }
    let Some(invoice) = args.get(4) else {
        eprintln!("usage: approvals-app BASE_URL JOURNAL call INVOICE");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("approvals-app: {e}");
            return ExitCode::FAILURE;
        }
    };
    let session = Session::new("s-app").allow("invoice", [invoice.as_str()]);
    let result = runtime.block_on(executor.call(
        "pay_invoice",
        json!({"invoice_id": invoice, "reason": "due today"}),
        &session,
    ));
    println!("{}", result.to_json());
    ExitCode::SUCCESS
}
