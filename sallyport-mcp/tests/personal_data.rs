//! Personal data over MCP (issue 40, §2): a real rmcp client calls `tools/call` over an
//! in-process pipe, the executor reads a customer through the real HTTP channel from a local
//! upstream on 127.0.0.1:0, and the `tools/call` result carries the masked values, the
//! findings in `structuredContent` and in the `_meta` mark, and none of the values.

use std::future::IntoFuture;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, JsonObject};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::{Action, Catalog, Executor, Sensitive, Session};
use sallyport_http::HttpChannel;
use sallyport_mcp::{ConsentRouter, McpServer, UPSTREAM_META};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A customer, as the upstream describes it.
#[derive(Deserialize, Serialize, JsonSchema, Sensitive)]
struct Customer {
    id: String,
    #[sensitive(email)]
    email: String,
    #[sensitive(iban)]
    bank: String,
}

/// Read one customer.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "read_customer", effect = observe)]
#[http(get = "/v1/customers/{id}", result = Customer)]
#[allow(dead_code)]
struct ReadCustomer {
    #[scope(customer)]
    id: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_call_result_carries_masked_values_and_their_findings_never_the_values() {
    let app = axum::Router::new().route(
        "/v1/customers/{id}",
        axum::routing::get(|| async {
            axum::Json(json!({
                "id": "c_1",
                "email": "jane.doe@example.com",
                "bank": "DE89 3704 0044 0532 0130 00"
            }))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(axum::serve(listener, app).into_future());
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = Catalog::builder()
        .action::<ReadCustomer>()
        .build()
        .expect("catalog");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .channel(
            HttpChannel::builder()
                .base_url(&url)
                .build()
                .expect("channel"),
        )
        .build()
        .expect("executor");
    let server = McpServer::new(executor, ConsentRouter::builder().build())
        .session(|id| Session::new(id.as_str()).allow("customer", ["c_1"]));
    let (server_end, client_end) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let _ = server.serve(tokio::io::split(server_end)).await;
    });
    let client = ().serve(tokio::io::split(client_end)).await.expect("initialize");
    let read = client
        .call_tool(
            CallToolRequestParams::new("read_customer")
                .with_arguments(JsonObject::from_iter([("id".to_owned(), json!("c_1"))])),
        )
        .await
        .expect("tools/call answered");
    assert_eq!(read.is_error, Some(false));
    let structured = read.structured_content.clone().expect("structuredContent");
    assert_eq!(structured["data"]["email"], "j***@example.com");
    assert_eq!(structured["data"]["bank"], "DE** **** **** **** **30 00");
    assert_eq!(
        structured["findings"],
        json!([
            {"kind": "personal_data", "rule": "email", "pointer": "/data/email", "action": "masked"},
            {"kind": "personal_data", "rule": "iban", "pointer": "/data/bank", "action": "masked"}
        ])
    );
    let meta = read.meta.clone().expect("_meta");
    assert_eq!(meta.0[UPSTREAM_META]["findings"], structured["findings"]);
    let everything = format!(
        "{}{}",
        serde_json::to_string(&read.content).expect("content"),
        serde_json::to_string(&structured).expect("structured")
    );
    for value in ["jane.doe", "3704 0044", "0532 0130"] {
        assert!(!everything.contains(value), "the client got {value}");
    }
    assert!(
        everything.contains("email at /data/email (masked)"),
        "{everything}"
    );
    client.cancel().await.expect("close");
}
