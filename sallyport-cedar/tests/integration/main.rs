//! Cedar policies at the authorize stage, linked into one test binary (one module per area,
//! as the other crates' tests are), through a real executor, a real SQLite journal and the
//! request-counting upstream of `sallyport_tests::http_server`.
//!
//! Run one area with its module path, e.g.
//! `cargo test -p sallyport-cedar --test integration policy_cedar::`.

mod policy_cedar;
mod session_calls;
