//! The examples' end-to-end tests, one module per example, linked into one test binary (one
//! binary each linked the whole dependency graph again). Each drives the example's real
//! binary, server or agent loop.
//!
//! Run one with its module path, e.g. `cargo test -p sallyport-examples --test integration quickstart::`.

mod support;

mod approvals;
mod hello_http;
mod mcp_http;
mod mcp_malformed;
mod mcp_stdio;
mod quickstart;
mod rig_agent;
mod testkit;
