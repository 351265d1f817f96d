//! The journal conformance suite against `PostgresJournal` on a real server, each check on
//! a database of its own.

use std::sync::{Arc, Mutex};

use sallyport_core::journal::ApprovalStore;
use sallyport_postgres::PostgresJournal;
use sallyport_testkit::conformance as suite;
use sallyport_tests::postgres::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_journal_passes_the_whole_conformance_suite() {
    let databases: Arc<Mutex<Vec<TestDb>>> = Arc::new(Mutex::new(Vec::new()));
    let held = Arc::clone(&databases);
    suite::run_all(move || {
        let held = Arc::clone(&held);
        async move {
            let db = TestDb::create().await;
            let journal = PostgresJournal::connect(&db.url).await.expect("connect");
            held.lock().expect("databases").push(db);
            Arc::new(journal) as Arc<dyn ApprovalStore>
        }
    })
    .await;
    let databases = std::mem::take(&mut *databases.lock().expect("databases"));
    assert_eq!(
        databases.len(),
        17,
        "every check ran on a journal of its own"
    );
}
