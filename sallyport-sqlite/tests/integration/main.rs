//! The SQLite journal on real files, one module per area, linked into one test binary: the
//! hash-chained audit log and what `verify` finds in an edited file, the journal conformance
//! suite of `sallyport-testkit`, and several real processes on one file (this crate's
//! `journal-writer` and `approval-decider` helper binaries, built by its `test-helpers`
//! feature).
//!
//! Run one area with its module path, e.g.
//! `cargo test -p sallyport-sqlite --test integration journal_processes::`.

mod audit;
mod checkpoints;
mod journal_conformance;
mod journal_processes;
mod retention;
