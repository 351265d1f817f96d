//! The PostgreSQL backend against a real server, one module per area, linked into one test
//! binary: the journal, leases and fencing, and what errors and `Debug` show of a password.
//!
//! Run one area with its module path, e.g. `cargo test -p sallyport-postgres --test integration leases::`.

mod journal;
mod leases;
mod secrets;
