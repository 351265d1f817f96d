//! The console's integration tests, one module per area, linked into one test binary: the
//! router over a real listener, the confirmation step, `sallyport console` from the CLI, and
//! the pages in a real headless Chromium.
//!
//! Run one area with its module path, e.g. `cargo test -p sallyport-console --test integration router::`.

mod common;

mod approver_view;
mod browser;
mod cli;
mod confirm;
mod findings;
mod router;
