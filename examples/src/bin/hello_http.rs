//! Hello, HTTP: one read-only action through the whole pipeline, against a demo API this
//! program starts on 127.0.0.1. `cargo run -p sallyport-examples --bin hello_http`

use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session, journal::SqliteJournal};
use sallyport_examples::upstream::{DEMO_TOKEN, DemoUpstream};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// List the builds of one project, with their test results.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "list_builds", effect = observe, credential = "demo-api")]
#[http(get = "/v1/projects/{project_id}/builds", result = Builds)]
struct ListBuilds {
    #[scope(project)]
    project_id: String,
}

/// What the agent gets back: these fields of the answer, nothing else.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Builds {
    builds: Vec<Build>,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Build {
    build_id: String,
    tests: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let upstream = DemoUpstream::start(DEMO_TOKEN).await?;
    let vault = MemoryVault::new(); // the credential's binding is the API's base URL
    let binding = Binding::url(upstream.base_url());
    vault.set(
        CredentialMeta::new("demo-api", CredentialKind::Bearer, binding),
        Secret::new(DEMO_TOKEN),
    );
    let dir = std::env::temp_dir().join(format!("sallyport-hello-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let executor = Executor::builder(Catalog::builder().action::<ListBuilds>().build()?)
        .journal(SqliteJournal::open(dir.join("journal.db"))?) // intents + audit chain
        .vault(vault)
        .channel(sallyport_http::HttpChannel::builder().build()?)
        .build()?;

    let session = Session::new("hello").allow("project", ["proj_42"]);
    let result = executor
        .run(
            &ListBuilds {
                project_id: "proj_42".into(),
            },
            &session,
        )
        .await;
    println!("{}", result.result.to_json()); // what an agent would see
    for build in result
        .completed()
        .map_err(|other| format!("not completed: {other}"))?
        .builds
    {
        println!("{}: tests {}", build.build_id, build.tests);
    }
    drop(executor); // closes the journal
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
