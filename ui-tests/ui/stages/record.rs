//! Only the executor makes a `CallRecord`, the value the `record` stage appends: code outside it
//! cannot build one (an audit record no stage filled in), so no record says what no stage proved.

use std::sync::Arc;

use sallyport_core::executor::record::CallRecord;
use sallyport_core::journal::AttemptId;
use sallyport_core::scrub::Scrubber;
use sallyport_core::session::Session;

fn forge(attempt_id: AttemptId, session: &Session, scrubber: Arc<Scrubber>) -> CallRecord {
    CallRecord::new(attempt_id, "send", session, scrubber)
}

fn main() {
    let _ = forge;
}
