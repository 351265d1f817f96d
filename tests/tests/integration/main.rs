//! The workspace's integration tests: flows across crates, one module per area, linked into
//! one test binary. A crate's own tests live in that crate's `tests/` directory (the HTTP
//! channel's in `sallyport-http/tests`, the SSH channel's in `sallyport-ssh/tests`, the
//! PostgreSQL journal's in `sallyport-postgres/tests`).
//!
//! They used to be one binary each, forty of them. Each linked the whole dependency graph and
//! instantiated the executor's generic code again: with the package's other binaries, 234 s
//! of the cold test build's 1,290 s of compile time (`cargo test --timings`). The tests that
//! need a process of their own stay beside this directory as binaries of their own: `canary`
//! installs a global tracing subscriber, and `drift_logging` and `otel` depend on tracing's
//! process-wide interest cache.
//!
//! Run one area with its module path, e.g.
//! `cargo test -p sallyport-tests --test integration pipeline::`.

#[path = "../vault_support/mod.rs"]
mod vault_support;

mod approvals;
mod approvals_postgres;
mod audit;
mod catalog;
mod cli_approvals;
mod cli_audit;
mod cli_postgres;
mod cli_vault;
mod consent_display;
mod consent_terminal;
mod derive;
mod derive_limits;
mod drift_baseline;
mod drift_cli;
mod drift_openapi;
mod drift_probe;
mod journal_conformance;
mod journal_conformance_postgres;
mod journal_postgres_processes;
mod journal_processes;
mod lean_build;
mod pipeline;
mod policy;
mod policy_cedar;
mod prepared_request;
mod readme_program;
mod reconcile;
mod scaffold;
mod scaffold_github;
mod scrub_truncation;
mod vault_file;
mod vault_keychain;
mod vault_lock_mid_call;
mod vault_memory;
