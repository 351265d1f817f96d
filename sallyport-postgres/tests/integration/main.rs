//! The PostgreSQL backend against a real server, one module per area, linked into one test
//! binary: the journal, the journal conformance suite of `sallyport-testkit`, leases and
//! fencing, several real executor processes on one database (this crate's `pg-executor`
//! helper binary, built by its `test-helpers` feature), the server going away under an
//! executor (and the records kept through it), a crash-stop of a server of the test's own
//! mid-load, a failover from a primary to its synchronous standby mid-load (the servers
//! both tests start come from `sallyport_tests::cluster`, their executor fleet and checks from
//! `server_loss`), and what errors and `Debug` show of a password; and the policy's call
//! counts shared by the fleet (processes racing for a limit with the `limits-executor`
//! helper, on PostgreSQL and on a SQLite file; a policy reading the session's recent
//! calls); and the OAuth grant store (`grants`: the grant conformance suite, sealing, key
//! rotation, a holder process killed mid-hold, concurrent refreshers; `grants_http`: two
//! executors refreshing through it against the real OpenID provider). The server and a
//! fresh database per test come from `sallyport_tests::postgres`.
//!
//! Signed checkpoints and inclusion proofs over a PostgreSQL journal (`checkpoints`), and
//! the audit chain in shards (`shards`).
//!
//! A decision reaches an approval worker through `LISTEN`/`NOTIFY` (`approval_wakeup`: a
//! worker polling once an hour sends within seconds, also after its listening connection
//! was terminated or cut).
//!
//! Run one area with its module path, e.g. `cargo test -p sallyport-postgres --test integration leases::`.

mod approval_wakeup;
mod checkpoints;
mod grants;
mod grants_http;
mod journal;
mod journal_conformance_postgres;
mod journal_postgres_crash_stop;
mod journal_postgres_failover;
mod journal_postgres_outage;
mod journal_postgres_outage_records;
mod journal_postgres_processes;
mod leases;
mod limits_processes;
mod policy_history;
mod retention;
mod secrets;
mod server_loss;
mod shards;
