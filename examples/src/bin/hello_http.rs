//! Hello, HTTP: one read-only action through the whole pipeline, against a demo API this
//! program starts on 127.0.0.1. `cargo run -p sallyport-examples --bin hello_http`

use sallyport_core::{Action, Catalog, Executor, Session, journal::SqliteJournal};

/// The latest build of one project, with its test result.
#[derive(Action, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[action(name = "latest_build", effect = observe, credential = "demo-api")]
#[http(get = "/v1/projects/{project_id}/builds/latest", result = Build)]
struct LatestBuild {
    #[scope(project)]
    project_id: String,
}

/// What the agent gets back: these fields of the answer, nothing else.
#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Build {
    build_id: String,
    tests: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sandbox = sallyport_examples::setup::Sandbox::start("demo-api").await?;
    let executor = Executor::builder(Catalog::builder().action::<LatestBuild>().build()?)
        .journal(SqliteJournal::open(&sandbox.journal_path)?) // intents + audit chain
        .vault(sandbox.vault) // the API's token, bound to its base URL
        .channel(sallyport_http::HttpChannel::builder().build()?)
        .build()?;
    let session = Session::new("hello").allow("project", ["proj_42"]);
    let project_id = "proj_42".to_owned();
    let result = executor.run(&LatestBuild { project_id }, &session).await;
    println!("{result}"); // what the agent sees
    Ok(())
}
