//! A Rust policy over the session's recent calls, read from the journal's shared call store,
//! on PostgreSQL and on a SQLite file: "an item may be deleted only after it was read in this
//! session" and "at most 3 external commitments per session per hour". Two executors, each
//! with its own journal handle (its own connections) on one database or file, stand for two
//! processes: what one let through, the other's policy sees.

use std::sync::Arc;

use sallyport_core::code::RefusalCode;
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::{Journal, SqliteJournal};
use sallyport_core::policy::{Policy, PolicyDecision, PolicyRequest};
use sallyport_core::{Action, Catalog, EffectClass, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_postgres::PostgresJournal;
use sallyport_tests::http_server::{Reply, Upstream};
use sallyport_tests::postgres::TestDb;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Read one item.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_item", effect = observe)]
#[http(get = "/v1/items/{item_id}", result = Item)]
struct GetItem {
    #[scope(item)]
    item_id: String,
}

/// Delete one item for good.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "delete_item", effect = irreversible_or_broad)]
#[http(delete = "/v1/items/{item_id}", result = Item)]
struct DeleteItem {
    #[scope(item)]
    item_id: String,
}

/// Publish one item.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "publish_item", effect = external_commitment)]
#[http(post = "/v1/items/{item_id}/publish", result = Item)]
struct PublishItem {
    #[scope(item)]
    item_id: String,
}

/// Mail one item to its owner.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "mail_item", effect = external_commitment)]
#[http(post = "/v1/items/{item_id}/mail", result = Item)]
struct MailItem {
    #[scope(item)]
    item_id: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Item {
    id: String,
}

/// The two rules over the session's history.
#[derive(Debug)]
struct History;

impl Policy for History {
    fn name(&self) -> &str {
        "history"
    }

    fn decide(&self, request: &PolicyRequest<'_>) -> PolicyDecision {
        let calls = request.session_calls;
        if request.effect == EffectClass::ExternalCommitment
            && calls.by_effect.external_commitment.hour >= 3
        {
            return PolicyDecision::deny("at most 3 external commitments per session per hour")
                .with_rule("three-commitments");
        }
        if request.action == "delete_item" {
            for object in request.objects {
                let read = calls.find("get_item", &object.kind, &object.value, Status::Completed);
                if read.is_none() {
                    return PolicyDecision::deny(format!(
                        "read {} in this session before deleting it",
                        object.value
                    ))
                    .with_rule("read-before-delete");
                }
            }
        }
        PolicyDecision::allow()
    }
}

fn catalog() -> Catalog {
    Catalog::builder()
        .action::<GetItem>()
        .action::<DeleteItem>()
        .action::<PublishItem>()
        .action::<MailItem>()
        .build()
        .expect("catalog")
}

fn executor(journal: Arc<dyn Journal>, upstream: &Upstream) -> Executor {
    Executor::builder(catalog())
        .journal_arc(journal)
        .channel(
            HttpChannel::builder()
                .base_url(upstream.url())
                .build()
                .expect("channel"),
        )
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .policy(History)
        .build()
        .expect("executor")
}

fn session(id: &str) -> Session {
    Session::new(id).allow_any("item")
}

fn item(id: &str) -> serde_json::Value {
    json!({ "item_id": id })
}

/// Both rules, with calls spread over two executors `a` and `b` on one store.
async fn rules_hold(a: &Executor, b: &Executor, upstream: &Upstream) {
    let s = session("s1");
    // Delete before any read: denied, nothing sent.
    let unread = a.call("delete_item", item("it_1"), &s).await;
    assert_eq!(unread.status, Status::Rejected);
    assert_eq!(unread.code, Some(RefusalCode::PolicyDenied.into()));
    assert_eq!(
        unread.reason.as_deref(),
        Some(
            "policy `history` denied this call: read it_1 in this session before deleting it; nothing was sent"
        )
    );
    assert_eq!(upstream.requests(), 0);
    // A read in another session, or of another item, does not open it.
    assert_eq!(
        b.call("get_item", item("it_1"), &session("s2"))
            .await
            .status,
        Status::Completed
    );
    assert_eq!(
        b.call("get_item", item("it_2"), &s).await.status,
        Status::Completed
    );
    assert_eq!(
        a.call("delete_item", item("it_1"), &s).await.status,
        Status::Rejected
    );
    assert_eq!(upstream.requests(), 2);
    // Read through `b`, deleted through `a`: the store is shared.
    assert_eq!(
        b.call("get_item", item("it_1"), &s).await.status,
        Status::Completed
    );
    let deleted = a.call("delete_item", item("it_1"), &s).await;
    assert_eq!(deleted.status, Status::Completed, "{}", deleted.summary());
    assert_eq!(upstream.requests(), 4);

    // Three commitments by two actions through two executors, then the fourth is denied.
    let mut statuses = Vec::new();
    for (executor, action, id) in [
        (a, "publish_item", "it_2"),
        (b, "mail_item", "it_2"),
        (a, "mail_item", "it_3"),
    ] {
        statuses.push(executor.call(action, item(id), &s).await.status);
    }
    assert_eq!(statuses, [Status::Completed; 3]);
    let fourth = b.call("publish_item", item("it_3"), &s).await;
    assert_eq!(fourth.status, Status::Rejected);
    assert_eq!(
        fourth.reason.as_deref(),
        Some(
            "policy `history` denied this call: at most 3 external commitments per session per hour; nothing was sent"
        )
    );
    assert_eq!(upstream.requests(), 7, "the fourth commitment was not sent");
    // Reads go on, and another session commits.
    assert_eq!(
        a.call("get_item", item("it_3"), &s).await.status,
        Status::Completed
    );
    assert_eq!(
        a.call("publish_item", item("it_3"), &session("s2"))
            .await
            .status,
        Status::Completed
    );
    assert_eq!(upstream.requests(), 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_policy_sees_the_sessions_recent_calls_across_executors_on_postgres() {
    let db = TestDb::create().await;
    let upstream = Upstream::start(|_| Reply::Json(200, json!({"id": "it"}))).await;
    let a = executor(
        Arc::new(PostgresJournal::connect(&db.url).await.expect("a")),
        &upstream,
    );
    let b = executor(
        Arc::new(PostgresJournal::connect(&db.url).await.expect("b")),
        &upstream,
    );
    rules_hold(&a, &b, &upstream).await;
    // The store holds one row per call let through (9 sent, 0 of the 3 denied), each with
    // the status it ended with.
    let sql = db.sql().await;
    let rows = sql
        .query(
            "SELECT status, count(*) FROM sallyport_policy_calls GROUP BY status ORDER BY status",
            &[],
        )
        .await
        .expect("rows");
    let by_status: Vec<(Option<String>, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(by_status, [(Some("completed".to_owned()), 9)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_policy_sees_the_sessions_recent_calls_across_executors_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let upstream = Upstream::start(|_| Reply::Json(200, json!({"id": "it"}))).await;
    let a = executor(Arc::new(SqliteJournal::open(&path).expect("a")), &upstream);
    let b = executor(Arc::new(SqliteJournal::open(&path).expect("b")), &upstream);
    rules_hold(&a, &b, &upstream).await;
}

/// A host that opts out keeps the counts in memory: two executors on one journal then do
/// not see each other's calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_local_counts_one_executor_does_not_see_the_others_reads() {
    let db = TestDb::create().await;
    let upstream = Upstream::start(|_| Reply::Json(200, json!({"id": "it"}))).await;
    let local = |journal: PostgresJournal| {
        Executor::builder(catalog())
            .journal(journal)
            .channel(
                HttpChannel::builder()
                    .base_url(upstream.url())
                    .build()
                    .expect("channel"),
            )
            .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
            .policy(History)
            .local_call_counts()
            .build()
            .expect("executor")
    };
    let a = local(PostgresJournal::connect(&db.url).await.expect("a"));
    let b = local(PostgresJournal::connect(&db.url).await.expect("b"));
    let s = session("s1");
    assert_eq!(
        b.call("get_item", item("it_1"), &s).await.status,
        Status::Completed
    );
    assert_eq!(
        a.call("delete_item", item("it_1"), &s).await.status,
        Status::Rejected
    );
    assert_eq!(
        b.call("delete_item", item("it_1"), &s).await.status,
        Status::Completed
    );
    assert_eq!(upstream.requests(), 2);
    let sql = db.sql().await;
    let rows: i64 = sql
        .query_one("SELECT count(*) FROM sallyport_policy_calls", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(rows, 0, "nothing was counted in the database");
}
