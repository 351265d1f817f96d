//! The journal conformance suite against the kernel's in-memory journal.

use std::sync::Arc;

use sallyport_core::journal::{ApprovalStore, MemoryJournal};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_journal_passes_the_whole_conformance_suite() {
    let mut made = 0;
    sallyport_testkit::conformance::run_all(|| {
        made += 1;
        std::future::ready(Arc::new(MemoryJournal::new()) as Arc<dyn ApprovalStore>)
    })
    .await;
    assert_eq!(made, 17, "every check ran on a journal of its own");
}
