#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]
//! A `tools/call` round trip over stdio to `mcp-demo` (child process, rmcp client) versus a
//! direct `Executor::call` in this process, for the same observe action against the same
//! demo upstream, each with its own SQLite journal. Two rows between them say where the
//! difference goes: the same `McpServer` served in this process over an in-memory duplex
//! (rmcp and JSON on both ends, no process boundary), and a direct call on an executor built
//! as `mcp-demo` builds its own (baseline guard and consent router). Group `observe_call`
//! runs the bench's side (client, direct executor, upstream) on two workers;
//! `observe_call_one_thread` on one thread, as most MCP clients run. In both, the direct
//! call's upstream shares the caller's runtime, so its round trip to the upstream never waits
//! for another thread to wake, while `mcp-demo`'s always crosses to the bench's process.
//! `observe_call_upstream_apart` puts the upstream on a thread of its own (as a real upstream
//! is always elsewhere), the client on one thread: both paths then cross to the upstream the
//! same way, and the difference between them is what MCP adds.
//!
//! ```text
//! cargo bench -p sallyport-examples --bench mcp
//! ```

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use sallyport_core::drift::{Baseline, BaselineGuard};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Executor, Session};
use sallyport_examples::catalog::{CREDENTIAL, demo_catalog};
use sallyport_examples::upstream::{DEMO_TOKEN, DemoUpstream};
use sallyport_http::HttpChannel;
use sallyport_mcp::{ConsentRouter, McpServer};
use serde_json::json;

fn observe_round_trip(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    round_trips(c, "observe_call", &rt, None);
    // The client on one thread, as most MCP clients run (Node's event loop, Python's asyncio);
    // the direct call and the upstream share that thread too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    round_trips(c, "observe_call_one_thread", &rt, None);
    // The upstream on a thread of its own, the client on one thread.
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let upstream_thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("upstream runtime");
        rt.block_on(async {
            let upstream = DemoUpstream::start(DEMO_TOKEN).await.expect("upstream");
            url_tx.send(upstream.base_url()).expect("url");
            drop(stop_rx.await);
        });
    });
    let url = url_rx.recv().expect("upstream url");
    round_trips(c, "observe_call_upstream_apart", &rt, Some(url));
    let _ = stop_tx.send(());
    upstream_thread.join().expect("upstream thread");
}

/// The four rows of group `name`, everything of the bench's side on `rt`: the upstream too
/// unless `apart` names one running elsewhere.
fn round_trips(c: &mut Criterion, name: &str, rt: &tokio::runtime::Runtime, apart: Option<String>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_upstream, url) = match apart {
        Some(url) => (None, url),
        None => {
            let upstream = rt
                .block_on(DemoUpstream::start(DEMO_TOKEN))
                .expect("upstream");
            let url = upstream.base_url();
            (Some(upstream), url)
        }
    };

    // Direct: the executor in this process.
    let executor = demo_executor(&dir.path().join("direct.db"), &url, None);
    // Direct, on an executor built as `mcp-demo` builds its own.
    let served = demo_executor(
        &dir.path().join("served.db"),
        &url,
        Some(ConsentRouter::builder().build()),
    );
    let session = Session::new("bench").allow("project", ["proj_42"]);
    let arguments = json!({"project_id": "proj_42"});

    // MCP: mcp-demo as a child process over stdio, against the same upstream.
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
    // The same server in this process, over an in-memory duplex: rmcp and JSON on both
    // ends, no process boundary.
    let in_process = rt.block_on(async {
        let (client_end, server_end) = tokio::io::duplex(64 * 1024);
        let router = ConsentRouter::builder().build();
        let journal = dir.path().join("in-process.db");
        let server = McpServer::new(demo_executor(&journal, &url, Some(router.clone())), router)
            .session(|id| Session::new(id.as_str()).allow("project", ["proj_42"]));
        tokio::spawn(async move {
            let (read, write) = tokio::io::split(server_end);
            drop(server.serve((read, write)).await);
        });
        let (read, write) = tokio::io::split(client_end);
        ().serve((read, write))
            .await
            .expect("initialize in process")
    });
    let mut object = JsonObject::new();
    object.insert("project_id".into(), json!("proj_42"));
    let params = CallToolRequestParams::new("list_builds").with_arguments(object);

    let mut group = c.benchmark_group(name);
    group.sample_size(50);
    group.bench_function("direct_executor_call", |b| {
        b.to_async(rt).iter(|| async {
            let result = executor
                .call("list_builds", arguments.clone(), &session)
                .await;
            assert!(!result.is_error());
        });
    });
    group.bench_function("direct_executor_call_as_served", |b| {
        b.to_async(rt).iter(|| async {
            let result = served
                .call("list_builds", arguments.clone(), &session)
                .await;
            assert!(!result.is_error());
        });
    });
    group.bench_function("mcp_tools_call_in_process", |b| {
        b.to_async(rt).iter(|| async {
            let result = in_process
                .call_tool(params.clone())
                .await
                .expect("tools/call");
            assert_eq!(result.is_error, Some(false));
        });
    });
    group.bench_function("mcp_tools_call_over_stdio", |b| {
        b.to_async(rt).iter(|| async {
            let result = client.call_tool(params.clone()).await.expect("tools/call");
            assert_eq!(result.is_error, Some(false));
        });
    });
    group.finish();
    drop(rt.block_on(client.cancel()));
    drop(rt.block_on(in_process.cancel()));
}

/// The demo catalog's executor on a SQLite journal at `journal`, with the demo token in a
/// memory vault; with a consent router it also has the baseline guard, as `mcp-demo` builds it.
fn demo_executor(journal: &Path, url: &str, router: Option<Arc<ConsentRouter>>) -> Executor {
    let vault = MemoryVault::new();
    vault.set(
        CredentialMeta::new(CREDENTIAL, CredentialKind::Bearer, Binding::url(url)),
        Secret::new(DEMO_TOKEN),
    );
    let catalog = demo_catalog().expect("catalog");
    let guard = Arc::new(BaselineGuard::new(
        &catalog,
        Baseline::from_catalog(&catalog),
    ));
    let builder = Executor::builder(catalog)
        .journal(SqliteJournal::open(journal).expect("journal"))
        .vault(vault)
        .channel(HttpChannel::builder().build().expect("channel"));
    let builder = match router {
        Some(router) => builder.consent_arc(router).definition_guard(guard),
        None => builder,
    };
    builder.build().expect("executor")
}

criterion_group!(benches, observe_round_trip);
criterion_main!(benches);
