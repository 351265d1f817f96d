//! The quickstart's demo catalog as a stdio MCP server.
//!
//! ```text
//! cargo run -q --bin mcp-demo                         # embedded demo upstream, fresh state dir
//! cargo run -q --bin mcp-demo -- --baseline FILE      # serve only what FILE approves; re-read it on change
//! cargo run -q --bin mcp-demo -- --upstream URL       # a demo upstream running elsewhere
//! cargo run -q --bin mcp-demo -- --state-dir DIR      # vault and journal in DIR
//! cargo run -q --bin mcp-demo -- --http 127.0.0.1:8931 # Streamable HTTP at http://127.0.0.1:8931/mcp
//! cargo run -q --bin mcp-demo -- --terminal-consent   # ask on this process's controlling terminal
//! cargo run -q --bin mcp-demo -- --elicitation        # let the MCP client's user answer consent
//! ```
//!
//! One MCP connection is one sallyport session, scoped to project `proj_42` and customer
//! `cus_7`. Consent is the host's decision, so by default no one can answer and calls that
//! need consent are refused (`consent_unavailable`). `--terminal-consent` asks on the
//! controlling terminal (never stdin: that is the MCP client's pipe). `--elicitation` lets a
//! client that declares the `elicitation` capability show the request to its user, after the
//! terminal when both are given: use it only with a client you trust, since any client can
//! declare the capability. Only MCP messages are written to stdout; the paths of the vault
//! and journal go to stderr.
//!
//! With `--http ADDR` the server speaks Streamable HTTP instead of stdio, on a loopback
//! address only (port 0 picks a free port; the address is printed to stderr). Every request
//! must carry `Authorization: Bearer TOKEN`; the token is generated at start and printed once
//! to stderr (`sallyport-mcp: bearer token for http://ADDR/mcp: TOKEN`). Each MCP session
//! there is one sallyport session.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use sallyport_core::consent::TerminalConsent;
use sallyport_core::drift::{Baseline, BaselineGuard};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, FileVault, KdfParams, Secret, VaultAdmin,
};
use sallyport_core::{Executor, Session};
use sallyport_examples::catalog::{CREDENTIAL, demo_catalog};
use sallyport_examples::upstream::{DEMO_TOKEN, DemoUpstream};
use sallyport_http::HttpChannel;
use sallyport_mcp::{ConsentRouter, Elicitation, McpServer, bind_http, watch_lockfile};

const USAGE: &str = "usage: mcp-demo [--state-dir DIR] [--upstream URL] [--baseline FILE] [--http LOOPBACK_ADDR] [--terminal-consent] [--elicitation]";

#[derive(Default)]
struct Options {
    state_dir: Option<PathBuf>,
    upstream: Option<String>,
    baseline: Option<PathBuf>,
    http: Option<SocketAddr>,
    terminal_consent: bool,
    elicitation: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{arg} needs a value; {USAGE}"))
        };
        match arg.as_str() {
            "--state-dir" => options.state_dir = Some(PathBuf::from(value()?)),
            "--upstream" => options.upstream = Some(value()?),
            "--baseline" => options.baseline = Some(PathBuf::from(value()?)),
            "--terminal-consent" => options.terminal_consent = true,
            "--elicitation" => options.elicitation = true,
            "--http" => {
                let text = value()?;
                let addr = text.parse().map_err(|_| {
                    format!("--http needs an address like 127.0.0.1:8931, not {text}")
                })?;
                options.http = Some(addr);
            }
            _ => return Err(format!("unknown option {arg}; {USAGE}")),
        }
    }
    Ok(options)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("mcp-demo: {message}");
            return ExitCode::from(2);
        }
    };
    match run(options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-demo: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(options: Options) -> Result<(), Box<dyn std::error::Error>> {
    // The embedded upstream lives as long as the server.
    let (_embedded, base_url) = match options.upstream {
        Some(url) => (None, url),
        None => {
            let upstream = DemoUpstream::start(DEMO_TOKEN).await?;
            let url = upstream.base_url();
            (Some(upstream), url)
        }
    };
    let dir = match options.state_dir {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!(
            "sallyport-mcp-demo-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos()
        )),
    };
    std::fs::create_dir_all(&dir)?;
    let vault_path = dir.join("vault.sallyport");
    let journal_path = dir.join("journal.db");
    // Light Argon2id settings so the demo starts instantly; real vaults keep the defaults.
    let vault = FileVault::create(
        &vault_path,
        "mcp demo passphrase",
        KdfParams::new(8 * 1024, 1, 1),
    )?;
    vault.set(
        CredentialMeta::new(CREDENTIAL, CredentialKind::Bearer, Binding::url(&base_url)),
        Secret::new(DEMO_TOKEN),
    )?;
    eprintln!("mcp-demo: demo API {base_url}");
    eprintln!("mcp-demo: vault {}", vault_path.display());
    eprintln!("mcp-demo: journal {}", journal_path.display());

    let catalog = demo_catalog()?;
    let guard = match &options.baseline {
        Some(path) => {
            if !path.exists() {
                Baseline::from_catalog(&catalog).save(path)?;
            }
            Arc::new(BaselineGuard::from_lockfile(&catalog, path)?)
        }
        None => Arc::new(BaselineGuard::new(
            &catalog,
            Baseline::from_catalog(&catalog),
        )),
    };
    let _watch = options
        .baseline
        .as_ref()
        .map(|path| watch_lockfile(Arc::clone(&guard), path, Duration::from_millis(100)));

    let mut consent = ConsentRouter::builder();
    if options.terminal_consent {
        consent = consent.provider(Arc::new(TerminalConsent::new()));
    }
    if options.elicitation {
        consent = consent.elicitation(Elicitation::Fallback);
    }
    let consent = consent.build();
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(&journal_path)?)
        .vault(vault)
        .channel(HttpChannel::builder().build()?)
        .consent_arc(consent.clone())
        .definition_guard(guard.clone())
        .build()?;
    let server = McpServer::new(executor, consent)
        .baseline(guard)
        .server_info("sallyport-mcp-demo", env!("CARGO_PKG_VERSION"))
        .instructions(
            "Demo deployments-and-invoices API. This session may touch project proj_42 and customer cus_7.",
        )
        .session(|id| {
            Session::new(id.as_str())
                .allow("project", ["proj_42"])
                .allow("customer", ["cus_7"])
        });
    match options.http {
        None => server.serve_stdio().await?,
        Some(addr) => {
            let listener = bind_http(addr).await?;
            eprintln!(
                "mcp-demo: serving MCP over Streamable HTTP at http://{}/mcp",
                listener.local_addr()?
            );
            server.serve_http_on(listener).await?;
        }
    }
    Ok(())
}
