//! sallyport-testkit: the bench every catalog should pass, run against your own catalog in
//! one test.
//!
//! ```no_run
//! # async fn demo(catalog: sallyport_core::Catalog) {
//! sallyport_testkit::bench(&catalog).run().await.assert_passed();
//! # }
//! ```
//!
//! For each HTTP action the bench stands up, from the action's own template, a real
//! fault-injecting upstream on `127.0.0.1:0` with a request counter, an executor over your
//! catalog with a real SQLite journal in a temporary directory and an in-memory vault
//! holding a canary credential bound to that upstream, and checks:
//!
//! 1. `unknown_field_refused` — an unknown field is refused and nothing is sent;
//! 2. `out_of_scope_refused` — an object outside the session's scope is refused and nothing
//!    is sent (for each scope kind the action's fields are tagged with);
//! 3. `consent_denied_sends_nothing` — for actions whose consent rule asks;
//! 4. `timeout_after_commit_is_unknown` — for mutating actions: the server commits and never
//!    answers; the result is `unknown` with the reconcile action in `next`, and the server saw
//!    one request, or the same idempotency key on each resend;
//! 5. `sensitive_data_never_leaves` — a stack trace, an internal URL and the credential the
//!    upstream echoes (for actions that bind one), beside the result, inside its free strings
//!    and in a `500` body, never reach the result, the audit record or the `TRACE` logs the
//!    executor and the channel write while they run the call;
//! 6. `revoked_credential_stops` — after a `401` the credential is used for no further
//!    request;
//! 7. `dropped_call_is_recorded` — a call whose future is dropped is recorded as
//!    `cancelled_before_send` (dropped while consent was pending, nothing sent) or
//!    `cancelled_unknown` (dropped while the server held the request);
//! 8. `consent_after_static_checks_before_send` — static refusals ask nobody, and a valid
//!    call is asked about before its first request.
//!
//! The [`Report`] prints one line per action and check with what was observed; a failed
//! check names the action, the check and what to change ("declare a reconcile action",
//! "declare `result = …`"). A check that does not apply is reported as `n/a` with the
//! reason, never as passed: SSH actions and actions on a channel of your own are listed
//! that way in this version.
//!
//! # Arguments
//!
//! The bench needs one valid call per action. Where the input schema has patterns or
//! formats it cannot satisfy by itself, give an example; the objects its `#[scope(…)]`
//! fields name become the session's scope:
//!
//! ```no_run
//! # async fn demo(catalog: sallyport_core::Catalog) {
//! use serde_json::json;
//!
//! sallyport_testkit::bench(&catalog)
//!     .example("get_invoice", json!({"customer_id": "cus_7", "reference": "inv-2026-001"}))
//!     .run()
//!     .await
//!     .assert_passed();
//! # }
//! ```
//!
//! Without one, the bench tries a value of the schema's shape (the first enum value, the
//! minimum, strings made from simple patterns such as `^proj_[A-Za-z0-9]+$`, common
//! formats); if the executor's static checks refuse it, the `arguments` check fails with
//! ``add `.example("get_invoice", json!({…}))` to the bench``.
//!
//! # Journal conformance (feature `conformance`)
//!
//! Writing your own journal backend? The `conformance` module is the suite the SQLite,
//! PostgreSQL and in-memory journals pass: attempts and the hash chain ([`Journal`]), every compare-and-set
//! transition of the approval store ([`ApprovalStore`]), races between concurrent writers,
//! and a last record written even when its future is dropped after the first poll. Each
//! check takes a fresh, empty store; `conformance::run_all` runs them all from a factory.
//! Enable the feature in your dev-dependencies and run it in one test, on a multi-threaded
//! runtime (the concurrency checks spawn tasks):
//!
//! ```toml
//! [dev-dependencies]
//! sallyport-testkit = { version = "0.1", features = ["conformance"] }
//! ```
//!
//! ```ignore
//! use std::sync::Arc;
//! use sallyport_core::journal::ApprovalStore;
//!
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn my_journal_passes_the_conformance_suite() {
//!     sallyport_testkit::conformance::run_all(|| async {
//!         Arc::new(MyJournal::open_fresh().await) as Arc<dyn ApprovalStore>
//!     })
//!     .await;
//! }
//! ```
//!
//! A check that fails panics with what the backend did wrong. A journal that keeps no
//! approvals cannot pass it: implement [`ApprovalStore`] too (deferred consent needs it).
//!
//! # Grant store conformance (feature `conformance`)
//!
//! Writing your own OAuth grant store ([`GrantStore`])? The `grant_conformance` module is the
//! suite the memory vault's, the file vault's and PostgreSQL's (`sallyport-postgres`'s
//! `PgGrantStore`) stores pass: the compare-and-set on a grant's version, creating a
//! subject's grant, `put`, `remove` and `list`, subjects kept apart, no token in a summary
//! or a `Debug`, the vault's scrubber knowing the tokens, and the refresh hold excluding a
//! second holder. `grant_conformance::run_all` runs it from a factory of fixtures.
//!
//! [`GrantStore`]: sallyport_core::vault::GrantStore
//!
//! [`Journal`]: sallyport_core::journal::Journal
//! [`ApprovalStore`]: sallyport_core::journal::ApprovalStore

#![cfg_attr(docsrs, feature(doc_cfg))]

mod bench;
mod checks;
#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;
#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod grant_conformance;
mod logs;
mod report;
mod rig;
mod sample;
mod upstream;

pub use crate::bench::{Bench, bench};
pub use crate::report::{ActionReport, Check, CheckReport, Finding, FindingKind, Report, Verdict};
