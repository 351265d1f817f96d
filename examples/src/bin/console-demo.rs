//! The web console for approvals, with an agent that keeps asking.
//!
//! ```text
//! cargo run --bin console-demo [-- --listen 127.0.0.1:8640] [--every SECONDS]
//! ```
//!
//! Starts the demo upstream, an executor with deferred consent over a fresh journal and file
//! vault, an agent loop that parks a `create_invoice` call for approval every few seconds
//! (default 8), and the console ([`sallyport_console`]). It prints the URL and the login
//! token (once). Open the URL, log in, and approve or deny: an approved invoice is sent once,
//! through the executor, and the call's page shows its receipt; the chain page verifies the
//! journal and exports it. A `--listen` address other than loopback is refused before
//! anything starts or is printed: the demo serves no TLS.

use std::net::SocketAddr;
use std::time::Duration;

use sallyport_console::{Console, LoginToken};
use sallyport_core::approval::ConsentMode;
use sallyport_core::{Executor, Session};
use sallyport_examples::catalog::demo_catalog;
use sallyport_examples::setup::Demo;
use sallyport_http::HttpChannel;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (listen, every) = options()?;
    // Before anything starts or is printed: a token printed for a console that then refuses
    // its address (not loopback, no TLS) would be a secret shown for nothing.
    sallyport_console::check_listen(listen, false)?;
    let demo = Demo::start("console-demo").await?;
    let executor = Executor::builder(demo_catalog()?)
        .journal_arc(demo.journal.clone())
        .vault(demo.vault)
        .channel(HttpChannel::builder().build()?)
        .consent_mode(ConsentMode::Deferred)
        .build()?;

    let token = LoginToken::generate()?;
    let console = Console::builder(executor.clone())
        .user("operator", token.clone())
        .build()?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    println!("sallyport console: http://{addr}/");
    println!("login token (shown once): {}", token.expose());
    println!("journal: {}", demo.dir.join("journal.db").display());
    println!("an agent parks an invoice for approval every {every} s; Ctrl-C stops");

    let agent = executor.clone();
    tokio::spawn(async move {
        let session = Session::new("billing-agent")
            .requested_by("billing-bot")
            .allow("customer", ["cus_7"]);
        for n in 1u64.. {
            let args = json!({
                "customer_id": "cus_7",
                "amount_cents": 1000 + n * 100,
                "reference": format!("inv-demo-{n}"),
                "reason": format!("usage invoice #{n} for cus_7, as agreed on the call"),
            });
            let parked = agent.call("create_invoice", args, &session).await;
            println!(
                "agent: create_invoice #{n} -> {} {}",
                parked.status,
                parked.approval_id.as_ref().map_or("", |id| id.as_str())
            );
            tokio::time::sleep(Duration::from_secs(every)).await;
        }
    });
    console.serve(listener).await?;
    Ok(())
}

fn options() -> Result<(SocketAddr, u64), Box<dyn std::error::Error>> {
    let mut listen: SocketAddr = "127.0.0.1:8640".parse()?;
    let mut every = 8;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = args.next().ok_or("--listen ADDR:PORT")?.parse()?,
            "--every" => every = args.next().ok_or("--every SECONDS")?.parse()?,
            other => return Err(format!("unknown option `{other}`").into()),
        }
    }
    Ok((listen, every.max(1)))
}
