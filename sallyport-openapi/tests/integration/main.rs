//! OpenAPI documents against outgoing requests and actions, linked into one test binary
//! (one module per area, as the other crates' tests are): real-world-shaped documents in
//! `tests/fixtures/openapi`, including GitHub's whole REST API description.
//!
//! Run one area with its module path, e.g.
//! `cargo test -p sallyport-openapi --test integration drift_openapi::`.

mod drift_openapi;
