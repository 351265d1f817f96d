//! The sallyport quickstart: every part of the pipeline, on embedded defaults, in seconds.
//!
//! ```text
//! cargo run --bin quickstart                 # narrated
//! cargo run --bin quickstart -- --json       # one ActionResult per line on stdout
//! cargo run --bin quickstart -- --interactive  # you answer the consent prompts
//! ```
//!
//! It starts a demo API in this process, creates an encrypted file vault and a SQLite journal
//! in a fresh directory, and plays an agent's session. It exits non-zero if any step does not
//! behave as described, so it doubles as a test.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sallyport_core::code::RefusalCode;
use sallyport_core::consent::{ConsentDecision, ConsentProvider, FnConsent, TerminalConsent};
use sallyport_core::journal::Journal;
use sallyport_core::outcome::ActionResult;
use sallyport_core::outcome::Status;
use sallyport_core::{Executor, Session};
use sallyport_examples::catalog::demo_catalog;
use sallyport_examples::setup::{DEMO_TOKEN, Demo};
use sallyport_http::HttpChannel;
use serde_json::{Value, json};

struct Narrator {
    json: bool,
    failures: Vec<String>,
}

impl Narrator {
    /// Human text: stdout normally, stderr under `--json`.
    fn say(&self, text: &str) {
        if self.json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }

    fn result(&self, result: &ActionResult) {
        if self.json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", result.to_json());
        } else {
            let pretty = serde_json::to_string_pretty(result).unwrap_or_default();
            println!("  result: {}", pretty.replace('\n', "\n  "));
        }
    }

    fn check(&mut self, ok: bool, what: &str) {
        if ok {
            self.say(&format!("  ✓ {what}"));
        } else {
            self.say(&format!("  ✗ {what}"));
            self.failures.push(what.to_owned());
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let interactive = args.iter().any(|a| a == "--interactive");
    if let Some(unknown) = args
        .iter()
        .find(|a| *a != "--json" && *a != "--interactive")
    {
        eprintln!("quickstart: unknown option {unknown}; use --json and/or --interactive");
        return ExitCode::from(2);
    }
    match run(json, interactive).await {
        Ok(n) if n.failures.is_empty() => ExitCode::SUCCESS,
        Ok(n) => {
            eprintln!(
                "quickstart: {} step(s) did not behave as described:",
                n.failures.len()
            );
            for f in &n.failures {
                eprintln!("  - {f}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(json: bool, interactive: bool) -> Result<Narrator, Box<dyn std::error::Error>> {
    let mut n = Narrator {
        json,
        failures: Vec::new(),
    };

    // --- Embedded defaults -------------------------------------------------------------
    let Demo {
        upstream,
        dir,
        vault,
        journal,
    } = Demo::start("quickstart").await?;
    let vault_path = dir.join("vault.sallyport");
    let journal_path = dir.join("journal.db");
    n.say("sallyport quickstart");
    n.say(&format!("  demo API:  {}", upstream.base_url()));
    n.say(&format!(
        "  vault:     {} (encrypted; the agent never sees the token)",
        vault_path.display()
    ));
    n.say(&format!("  journal:   {}", journal_path.display()));

    let catalog = demo_catalog()?;
    n.say("\n== The action cards");
    for entry in catalog.entries() {
        n.say(&entry.spec().card());
    }
    n.say("== The MCP tool export (first tool)");
    n.say(&serde_json::to_string_pretty(&catalog.mcp_tools()[0])?);

    let deny_next = Arc::new(AtomicBool::new(false));
    let consent: Arc<dyn ConsentProvider> = if interactive {
        Arc::new(TerminalConsent::new())
    } else {
        let deny = Arc::clone(&deny_next);
        let narrate_to_stderr = json;
        Arc::new(FnConsent::new(move |request| {
            let denied = deny.swap(false, Ordering::SeqCst);
            let text = format!(
                "  [human is asked]\n    {}\n  [human answers: {}]",
                request.render().trim_end().replace('\n', "\n    "),
                if denied { "deny" } else { "approve" }
            );
            if narrate_to_stderr {
                eprintln!("{text}");
            } else {
                println!("{text}");
            }
            async move {
                if denied {
                    ConsentDecision::Deny {
                        reason: Some("not this build".to_owned()),
                    }
                } else {
                    ConsentDecision::Approve
                }
            }
        }))
    };

    let executor = Executor::builder(catalog)
        .journal_arc(journal.clone())
        .vault(vault)
        .channel(HttpChannel::builder().build()?)
        .consent_arc(consent)
        .build()?;
    let session = Session::new("quickstart-agent")
        .allow("project", ["proj_42"])
        .allow("customer", ["cus_7"]);

    // --- The agent's session -----------------------------------------------------------
    let call = |name: &'static str, args: Value| {
        let executor = executor.clone();
        let session = session.clone();
        async move { executor.call(name, args, &session).await }
    };

    n.say("\n== 1. An observe call");
    let args = json!({"project_id": "proj_42"});
    n.say(&format!("  agent asks: list_builds {args}"));
    let r = call("list_builds", args).await;
    n.result(&r);
    n.check(r.status == Status::Completed, "completed");
    n.check(
        !r.to_json().contains("internal_trace") && !r.to_json().contains("10.0.3.7"),
        "only the declared result fields reach the agent (no internal_trace)",
    );

    n.say("\n== 2. A preview deployment: pending, then polled to ready");
    let args = json!({"project_id": "proj_42", "build_id": "build_101", "reason": "preview the fix for ticket 42"});
    n.say(&format!("  agent asks: create_preview_deployment {args}"));
    let r = call("create_preview_deployment", args.clone()).await;
    n.result(&r);
    n.check(r.status == Status::Pending, "pending");
    let next = r.next.clone();
    n.check(
        next.as_ref()
            .is_some_and(|nx| nx.action == "get_deployment_status"),
        "next names get_deployment_status",
    );
    if let Some(next) = next {
        let mut ready = false;
        for _ in 0..5 {
            n.say(&format!(
                "  agent polls: {} {}",
                next.action, next.arguments
            ));
            let poll = executor
                .call(&next.action, next.arguments.clone(), &session)
                .await;
            n.result(&poll);
            if poll.status == Status::Completed
                && poll
                    .data
                    .as_ref()
                    .and_then(|d| d["operation_status"].as_str())
                    == Some("ready")
            {
                ready = true;
                break;
            }
        }
        n.check(ready, "the deployment completed (operation_status ready)");
    }

    n.say("\n== 3. The same deployment again");
    let r = call("create_preview_deployment", args).await;
    n.result(&r);
    n.check(
        r.status == Status::AlreadyInDesiredState,
        "already_in_desired_state",
    );

    n.say("\n== 4. An unknown field");
    let args = json!({"project_id": "proj_42", "include_deleted": true});
    n.say(&format!("  agent asks: list_builds {args}"));
    let before = upstream.requests();
    let r = call("list_builds", args).await;
    n.result(&r);
    n.check(
        r.status == Status::Rejected
            && r.code == Some(RefusalCode::InvalidArguments.into())
            && r.divergences.first().is_some_and(|d| {
                d.kind.as_str() == "unknown_field" && d.path == "/include_deleted"
            }),
        "rejected: invalid_arguments, unknown_field at /include_deleted",
    );
    n.check(upstream.requests() == before, "zero upstream requests");

    n.say("\n== 5. Another project");
    let args = json!({"project_id": "proj_999"});
    n.say(&format!("  agent asks: list_builds {args}"));
    let before = upstream.requests();
    let r = call("list_builds", args).await;
    n.result(&r);
    n.check(
        r.code == Some(RefusalCode::OutOfScope.into()),
        "rejected: out_of_scope",
    );
    n.check(upstream.requests() == before, "zero upstream requests");

    n.say("\n== 6. A human says no");
    let args = json!({"project_id": "proj_42", "build_id": "build_102", "reason": "preview the failing build"});
    n.say(&format!("  agent asks: create_preview_deployment {args}"));
    let before = upstream.requests();
    deny_next.store(!interactive, Ordering::SeqCst);
    let r = call("create_preview_deployment", args).await;
    n.result(&r);
    if !interactive {
        n.check(
            r.code == Some(RefusalCode::ConsentDenied.into()),
            "rejected: consent_denied",
        );
        n.check(upstream.requests() == before, "zero upstream requests");
    }

    n.say("\n== 7. An invoice whose answer is lost after the server committed it");
    let args = json!({"customer_id": "cus_7", "amount_cents": 12500, "reference": "drop-inv-001", "reason": "monthly support plan"});
    n.say(&format!("  agent asks: create_invoice {args}"));
    let before = upstream.requests();
    let r = call("create_invoice", args).await;
    n.result(&r);
    let sent = upstream.requests() - before;
    n.say(&format!(
        "  the server saw {sent} request(s), all with the same Idempotency-Key"
    ));
    if !interactive {
        n.check(
            r.status == Status::Unknown,
            "unknown: the agent is told not to retry",
        );
        let next = r.next.clone();
        n.check(
            next.as_ref().is_some_and(|nx| nx.action == "get_invoice"),
            "next names the read-only get_invoice",
        );
        if let Some(next) = next {
            n.say(&format!(
                "  agent reconciles: {} {}",
                next.action, next.arguments
            ));
            let check = executor
                .call(&next.action, next.arguments.clone(), &session)
                .await;
            n.result(&check);
            n.check(
                check.status == Status::Completed
                    && check.data.as_ref().and_then(|d| d["count"].as_u64()) == Some(1),
                "exactly one invoice exists",
            );
        }
        n.check(
            upstream.invoices_with_reference("drop-inv-001") == 1,
            "the server holds exactly one invoice",
        );
    }

    // --- The audit chain -----------------------------------------------------------------
    n.say("\n== The audit chain");
    let report = journal.verify().await?;
    n.say(&format!(
        "  {} records; head {}",
        report.head.count, report.head.hash
    ));
    n.check(report.is_intact(), "the hash chain verifies");
    let records = journal.records().await?;
    let leaked = records.iter().any(|r| {
        serde_json::to_string(r)
            .unwrap_or_default()
            .contains(DEMO_TOKEN)
    });
    n.check(!leaked, "the token appears in no audit record");
    n.say(&format!(
        "\nInspect afterwards: sqlite3 {} 'select seq, event from audit'",
        journal_path.display()
    ));
    Ok(n)
}
