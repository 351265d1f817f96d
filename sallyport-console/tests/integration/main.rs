//! The console's integration tests, one module per area, linked into one test binary: the
//! router over a real listener, the confirmation step, `sallyport console` from the CLI, the
//! pages in a real headless Chromium, connecting an account against the real OpenID provider,
//! and approvers signing in with OpenID Connect at that provider (over HTTP and in Chromium).
//!
//! Run one area with its module path, e.g. `cargo test -p sallyport-console --test integration router::`.

mod common;

mod approver_view;
mod browser;
mod cli;
mod confirm;
mod connect;
mod findings;
mod oidc_login;
mod remembered;
mod router;
