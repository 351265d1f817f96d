//! An application that embeds the `sallyport` commands with its own executor
//! (`sallyport_cli::run_with_executor`), as a real process for
//! `tests/tests/integration/approvals_app.rs`.
//! The executor is [`sallyport_tests::approvals_rig`]'s (deferred consent, `send_invoice`).
//!
//! ```text
//! approvals-app JOURNAL UPSTREAM_URL call N        # the agent's call for invoice N: parked;
//!                                                  # prints the result as JSON
//! approvals-app JOURNAL UPSTREAM_URL approvals …   # the embedded command line
//! ```

use std::process::ExitCode;

use sallyport_tests::approvals_rig::{self, HostOptions};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(journal), Some(upstream), Some(mode)) = (args.get(1), args.get(2), args.get(3))
    else {
        eprintln!("usage: approvals-app JOURNAL UPSTREAM_URL (call N | approvals …)");
        return ExitCode::from(2);
    };
    let options = HostOptions::new(journal, upstream);
    let executor = approvals_rig::executor(&options, approvals_rig::vault(upstream));
    if mode != "call" {
        let cli_args = std::iter::once("approvals-app".to_owned()).chain(args[3..].iter().cloned());
        return sallyport_cli::run_with_executor(cli_args, &executor);
    }
    let Some(Ok(n)) = args.get(4).map(|n| n.parse::<usize>()) else {
        eprintln!("usage: approvals-app JOURNAL UPSTREAM_URL call N");
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
    let result = runtime.block_on(executor.call(
        "send_invoice",
        approvals_rig::invoice(n),
        &approvals_rig::session(),
    ));
    println!("{}", result.to_json());
    ExitCode::SUCCESS
}
