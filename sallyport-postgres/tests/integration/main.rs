//! The PostgreSQL backend against a real server, one module per area, linked into one test
//! binary: the journal, leases and fencing, the server going away under an executor, and what
//! errors and `Debug` show of a password. The server and a fresh database per test come from
//! `sallyport_tests::postgres`.
//!
//! Run one area with its module path, e.g. `cargo test -p sallyport-postgres --test integration leases::`.

mod journal;
mod journal_postgres_outage;
mod leases;
mod secrets;
