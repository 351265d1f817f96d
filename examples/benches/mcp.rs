#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]
//! A `tools/call` round trip over stdio to `mcp-demo` (child process, rmcp client) versus a
//! direct `Executor::call` in this process, for the same observe action against the same
//! demo upstream, each with its own SQLite journal.
//!
//! ```text
//! cargo bench -p sallyport-examples --bench mcp
//! ```

use std::process::Stdio;

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Executor, Session};
use sallyport_examples::catalog::{CREDENTIAL, demo_catalog};
use sallyport_examples::upstream::{DEMO_TOKEN, DemoUpstream};
use sallyport_http::HttpChannel;
use serde_json::json;

fn observe_round_trip(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let upstream = rt
        .block_on(DemoUpstream::start(DEMO_TOKEN))
        .expect("upstream");

    // Direct: the executor in this process.
    let vault = MemoryVault::new();
    vault.set(
        CredentialMeta::new(
            CREDENTIAL,
            CredentialKind::Bearer,
            Binding::url(upstream.base_url()),
        ),
        Secret::new(DEMO_TOKEN),
    );
    let executor = Executor::builder(demo_catalog().expect("catalog"))
        .journal(SqliteJournal::open(dir.path().join("direct.db")).expect("journal"))
        .vault(vault)
        .channel(HttpChannel::builder().build().expect("channel"))
        .build()
        .expect("executor");
    let session = Session::new("bench").allow("project", ["proj_42"]);
    let arguments = json!({"project_id": "proj_42"});

    // MCP: mcp-demo as a child process over stdio, against the same upstream.
    let url = upstream.base_url();
    let state = dir.path().join("mcp");
    let client = rt.block_on(async {
        let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-demo")).configure(|c| {
            c.arg("--upstream").arg(&url).arg("--state-dir").arg(&state);
        });
        let (transport, _) = TokioChildProcess::builder(command)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn mcp-demo");
        ().serve(transport).await.expect("initialize")
    });
    let mut object = JsonObject::new();
    object.insert("project_id".into(), json!("proj_42"));
    let params = CallToolRequestParams::new("list_builds").with_arguments(object);

    let mut group = c.benchmark_group("observe_call");
    group.sample_size(50);
    group.bench_function("direct_executor_call", |b| {
        b.to_async(&rt).iter(|| async {
            let result = executor
                .call("list_builds", arguments.clone(), &session)
                .await;
            assert!(!result.is_error());
        });
    });
    group.bench_function("mcp_tools_call_over_stdio", |b| {
        b.to_async(&rt).iter(|| async {
            let result = client.call_tool(params.clone()).await.expect("tools/call");
            assert_eq!(result.is_error, Some(false));
        });
    });
    group.finish();
    drop(rt.block_on(client.cancel()));
}

criterion_group!(benches, observe_round_trip);
criterion_main!(benches);
