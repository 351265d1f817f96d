//! The preview-deployment catalog from the design: `create_preview_deployment` returns
//! `pending` with `next`, the agent polls the read-only status action until it is ready, and a
//! repeated request is `already_in_desired_state`.
//!
//! ```text
//! cargo run --bin deployments
//! ```

use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::outcome::Status;
use sallyport_core::{Executor, Session};
use sallyport_examples::catalog::demo_catalog;
use sallyport_examples::setup::Demo;
use sallyport_http::HttpChannel;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let demo = Demo::start("deployments").await?;
    let catalog = demo_catalog()?;
    for name in ["create_preview_deployment", "get_deployment_status"] {
        if let Some(entry) = catalog.get(name) {
            println!("{}", entry.spec().card());
        }
    }
    let executor = Executor::builder(catalog)
        .journal_arc(demo.journal.clone())
        .vault(demo.vault)
        .channel(HttpChannel::builder().build()?)
        .consent(FnConsent::new(|request| async move {
            println!("consent requested:\n{}", request.render());
            ConsentDecision::Approve
        }))
        .build()?;
    let session = Session::new("release-agent").allow("project", ["proj_42"]);
    let args = json!({"project_id": "proj_42", "build_id": "build_101", "reason": "preview ticket 42's fix"});

    let created = executor
        .call("create_preview_deployment", args.clone(), &session)
        .await;
    println!("create_preview_deployment -> {}", created.to_json());
    assert_eq!(created.status, Status::Pending);
    let next = created.next.ok_or("pending names its status action")?;
    loop {
        let status = executor
            .call(&next.action, next.arguments.clone(), &session)
            .await;
        println!("{} -> {}", next.action, status.to_json());
        let state = status
            .data
            .as_ref()
            .and_then(|d| d["operation_status"].as_str());
        if state == Some("ready") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let again = executor
        .call("create_preview_deployment", args, &session)
        .await;
    println!("again -> {}", again.to_json());
    assert_eq!(again.status, Status::AlreadyInDesiredState);
    Ok(())
}
