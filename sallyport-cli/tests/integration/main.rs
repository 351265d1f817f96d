//! The `sallyport` command as a real process (this package's binary,
//! `CARGO_BIN_EXE_sallyport`) and the library entry points an application's own `main` calls,
//! one module per area, linked into one test binary: approvals, the audit log, the vault and
//! its OAuth grants, the shadow policy report, a PostgreSQL journal, baselines and
//! scaffolding.
//!
//! Run one area with its module path, e.g.
//! `cargo test -p sallyport-cli --test integration cli_vault::`.

mod cli_approvals;
mod cli_audit;
mod cli_connect;
mod cli_grants;
mod cli_grants_postgres;
mod cli_policy;
mod cli_postgres;
mod cli_proofs;
mod cli_retention;
mod cli_scaffold;
mod cli_vault;
mod cli_vault_kinds;
mod drift_cli;
