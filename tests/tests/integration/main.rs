//! The workspace's integration tests: flows across crates, one module per area, linked into
//! one test binary. A crate's own tests live in that crate's `tests/` directory (the executor's
//! in `sallyport-core/tests`, each backend's, channel's and tool's in its crate), each crate's
//! linked into one binary the same way.
//!
//! They used to be one binary each, forty of them. Each linked the whole dependency graph and
//! instantiated the executor's generic code again: with the package's other binaries, 234 s
//! of the cold test build's 1,290 s of compile time (`cargo test --timings`). The tests that
//! need a process of their own stay beside this directory as binaries of their own: `canary`
//! installs a global tracing subscriber, and `drift_logging` and `otel` depend on tracing's
//! process-wide interest cache.
//!
//! Run one area with its module path, e.g.
//! `cargo test -p sallyport-tests --test integration approvals::`.

mod answer_guards;
mod approvals;
mod approvals_app;
mod approvals_postgres;
mod approvals_quorum;
mod approvals_remembered;
mod approvals_wakeup;
mod consent_display;
mod consent_terminal;
mod crash_campaign;
mod derive_limits;
mod hooks;
mod lean_build;
mod oauth_fleet;
mod oauth_fleet_pg;
mod personal_data;
mod policy;
mod prepared_request;
mod readme_program;
mod reconcile;
mod scrub_truncation;
mod shadow;
mod subjects;
mod vault_lock_mid_call;
