//! The HTTP channel's tests through a real executor, one module per area, linked into one test
//! binary: the fault loop, probes, send rules, status answers, TLS trust, mTLS, and OpenAPI checks. `http_channel`
//! beside this directory is a binary of its own: it installs a global tracing subscriber.
//!
//! Run one area with its module path, e.g.
//! `cargo test -p sallyport-http --test integration http_send_rules::`.

mod http_fault_loop;
mod http_mtls;
mod mtls_rig;
// Needs the crate's `openapi` feature. Every build of these tests has it: the dev-dependency
// on `sallyport-tests` depends on `sallyport-http` with `openapi`, and Cargo unifies the
// features a package is asked for, so `cargo test -p sallyport-http` and
// `cargo test --workspace` both build and run this module.
#[cfg(feature = "openapi")]
mod http_openapi;
mod http_probe;
mod http_send_rules;
mod http_status_answers;
mod http_tls;
mod oauth_connect;
mod oauth_disconnect;
mod oauth_faults;
mod oauth_faults_expiry;
mod oauth_faults_recovery;
mod oauth_provider;
mod oauth_rig;
