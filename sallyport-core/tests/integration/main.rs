//! The executor and the items `sallyport-core` gives an application, one module per area,
//! linked into one test binary: the pipeline end to end, the catalog's tool exports, what
//! `#[derive(Action)]` produces (as an author's crate sees it, through this crate), definition
//! drift and permission probes at stage 5, and the in-memory vault. The channel is the
//! scripted one of `sallyport_tests::scripted`; the journal a real SQLite file.
//!
//! Run one area with its module path, e.g.
//! `cargo test -p sallyport-core --test integration pipeline::`.

mod catalog;
mod derive;
mod drift_baseline;
mod drift_probe;
mod pipeline;
mod vault_memory;
