//! A failover of the journal's PostgreSQL mid-load: a primary and a standby streaming from
//! it with synchronous replication, both the test's own servers (`initdb`, then
//! `pg_basebackup -R` of it), under real `pg-executor` processes connected with one
//! multi-host connection string (`target_session_attrs=read-write`). Mid-load the standby
//! is promoted (`pg_ctl promote`) and the old primary stopped at once (`pg_ctl stop -m
//! immediate`: its backends die mid-commit, as when the machine is lost). The executors are
//! not told: they find the new primary through the connection string alone.
//!
//! Afterwards, on the new primary: no request was sent twice, every request the upstream
//! received has its intent in the journal, every receipt an executor handed out (before the
//! failover too) has its record, and once the reconciler has run no attempt is unresolved,
//! the journal's send count equals the upstream's, and the one chain, written partly on each
//! server, verifies. The time each executor took to recover (from the old primary's stop to
//! its first durable call on the new primary, one answered with a receipt) is printed and
//! bounded.
//!
//! And a server that turns read-only under the journal's open connections (as a failover
//! may fence the old primary while it still runs): the journal leaves it for the server
//! that takes writes, its writes at once and its approval listener at its next check.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use sallyport_core::journal::{ApprovalStore, Journal, JournalError};
use sallyport_postgres::{PostgresError, PostgresJournal};

use super::server_loss::{Deployments, Fleet, check_nothing_lost_or_sent_twice, now_ms};
use sallyport_tests::cluster::Cluster;

const PROCESSES: usize = 3;
const CALLS: usize = 150;
const IN_FLIGHT: usize = 4;

/// The standby's name: its `application_name`, which the primary's
/// `synchronous_standby_names` waits for.
const STANDBY: &str = "standby1";

/// The primary's replication settings, as the README's "High availability" section has
/// them (`wal_level = replica` and 10 WAL senders are PostgreSQL's defaults, written out).
fn primary_settings() -> String {
    format!(
        "wal_level = replica\n\
         max_wal_senders = 5\n\
         synchronous_commit = on\n\
         synchronous_standby_names = 'FIRST 1 ({STANDBY})'"
    )
}

/// The standby's own settings: where it streams from, under which name, and no synchronous
/// standby of its own (it has the primary's `postgresql.conf`; promoted with that name in it,
/// it would wait for a standby it does not have at every commit).
fn standby_settings(primary: &Cluster) -> String {
    format!(
        "primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={STANDBY}'\n\
         synchronous_standby_names = ''",
        primary.port
    )
}

/// Waits until the primary reports the standby streaming as its synchronous standby.
async fn wait_until_synchronous(primary: &Cluster, standby: &Cluster) {
    let sql = sallyport_tests::postgres::client(&primary.url()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state: Option<String> = sql
            .query_opt(
                "SELECT sync_state FROM pg_stat_replication
                 WHERE application_name = $1 AND state = 'streaming'",
                &[&STANDBY],
            )
            .await
            .expect("pg_stat_replication")
            .map(|row| row.get(0));
        if state.as_deref() == Some("sync") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the standby never streamed synchronously (sync_state {state:?}):\n{}",
            standby.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_synchronous_standby_mid_load_loses_nothing_and_sends_nothing_twice() {
    let primary = Cluster::start("ha-primary", &primary_settings());
    let standby = Cluster::standby_of(&primary, "ha-standby", &standby_settings(&primary));
    wait_until_synchronous(&primary, &standby).await;
    // What the executors are given: both servers, the one that takes writes wanted.
    let url = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres \
         target_session_attrs=read-write",
        primary.port, standby.port
    );
    // The schema, made on the primary (the standby is read-only) before the executors start.
    drop(PostgresJournal::connect(&url).await.expect("journal"));

    let deployments = Deployments::start().await;
    let upstream = &deployments.upstream;
    let fleet = Fleet::spawn(&url, upstream, PROCESSES, CALLS, IN_FLIGHT);

    // Mid-load: a quarter of the calls sent.
    let quarter = (PROCESSES * CALLS / 4) as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while upstream.requests() < quarter {
        assert!(Instant::now() < deadline, "the executors never got going");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let failover_at = upstream.requests();
    let promote_began = now_ms();
    standby.promote();
    let stop_began = now_ms();
    primary.crash();
    let stopped = now_ms();

    let answers = fleet.wait().await;
    // The new primary takes writes.
    let in_recovery: bool = sallyport_tests::postgres::client(&standby.url())
        .await
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .expect("pg_is_in_recovery")
        .get(0);
    assert!(!in_recovery, "the standby was promoted");

    // Each executor's recovery: from the old primary's stop to its first durable call
    // after the stop returned: completed with a receipt, so its record was committed
    // synchronously, which the old primary could no longer do (from the promotion on its
    // synchronous commits waited for a standby it no longer had). A call answered
    // `record_pending` (completed, its record kept to be written later, no receipt) may
    // have been answered then without the new primary and does not count.
    let at = |a: &serde_json::Value| a["at_ms"].as_u64().expect("at_ms");
    let mut recoveries = Vec::new();
    for (i, calls) in answers.per_process.iter().enumerate() {
        let completed = calls.iter().filter(|a| {
            a["status"] == "completed" && a["receipt_id"].is_string() && a["record_pending"] != true
        });
        let before = completed.clone().filter(|a| at(a) < promote_began).count();
        let first_after = completed
            .clone()
            .map(at)
            .filter(|t| *t >= stopped)
            .min()
            .unwrap_or_else(|| panic!("process {i} made no durable call on the new primary"));
        assert!(
            before > 0,
            "process {i} completed no call before the failover"
        );
        recoveries.push(Duration::from_millis(first_after - stop_began));
    }
    eprintln!(
        "failover after {failover_at} requests: promote took {} ms, stop -m immediate {} ms; \
         recovery per executor (old primary's stop to its first durable call on the new primary): {recoveries:?}",
        stop_began - promote_began,
        stopped - stop_began
    );
    assert!(
        recoveries.iter().all(|r| *r < Duration::from_secs(30)),
        "an executor took more than 30 s to follow the new primary: {recoveries:?}"
    );

    // The checks read the new primary through the same multi-host string: the old one is
    // gone, the standby takes writes.
    check_nothing_lost_or_sent_twice(
        &format!("failover after {failover_at} requests"),
        &url,
        &deployments,
        &answers,
    )
    .await;
}

/// A server that stops taking writes under the journal's open connections (a primary set
/// read-only with `default_transaction_read_only`, as a failover fences the old one while it
/// still runs): the write that meets the refusal (SQLSTATE 25006) fails as any write while
/// the journal is unavailable, and the next one goes to the server that takes writes, found
/// through the multi-host connection string. Without the pool's check, its connections to
/// the read-only server were handed out again, and every write was refused by it. The
/// approval listener's connection follows at its next check (every 5 s); without that, it
/// stayed on the read-only server, which no decision on the new primary notifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_turned_read_only_is_left_for_the_one_that_takes_writes() {
    let first = Cluster::start("ro-first", "");
    let second = Cluster::start("ro-second", "");
    for cluster in [&first, &second] {
        drop(
            PostgresJournal::connect(&cluster.url())
                .await
                .expect("schema"),
        );
    }
    let url = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres \
         target_session_attrs=read-write",
        first.port, second.port
    );
    let journal = PostgresJournal::connect(&url).await.expect("journal");
    // Several connections in the pool, all to the first server (it takes writes).
    let warm: Vec<_> = (0..8)
        .map(|_| sallyport_tests::postgres::intent())
        .collect();
    for written in join_all(warm.iter().map(|i| journal.write_intent(i))).await {
        written.expect("an intent on the first server");
    }
    let on_first = sallyport_tests::postgres::client(&first.url()).await;
    let count: i64 = on_first
        .query_one("SELECT count(*) FROM sallyport_attempts", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(count, 8, "the first server took the writes");
    // An approval worker's watch: the journal's listening connection, on the first server.
    let watch = journal.watch_decisions();
    wait_for_listener(&first, "the first server").await;

    on_first
        .batch_execute("ALTER SYSTEM SET default_transaction_read_only = on")
        .await
        .expect("ALTER SYSTEM");
    on_first
        .query_one("SELECT pg_reload_conf()", &[])
        .await
        .expect("reload");
    // The reload reaches every session (a new one shows it when it has).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let fresh = sallyport_tests::postgres::client(&first.url()).await;
        let shown: String = fresh
            .query_one("SHOW transaction_read_only", &[])
            .await
            .expect("SHOW")
            .get(0);
        if shown == "on" {
            break;
        }
        assert!(Instant::now() < deadline, "the reload never took effect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut refused = 0;
    let written = loop {
        let intent = sallyport_tests::postgres::intent();
        match journal.write_intent(&intent).await {
            Ok(()) => break intent,
            Err(JournalError::Write(source)) => {
                let code = source
                    .downcast_ref::<PostgresError>()
                    .and_then(PostgresError::code)
                    .map(str::to_owned);
                assert_eq!(code.as_deref(), Some("25006"), "{source}");
                refused += 1;
                assert!(
                    refused < 10,
                    "every write went to the read-only server: {source}"
                );
            }
            Err(other) => panic!("{other:?}"),
        }
    };
    assert!(refused >= 1, "no write met the read-only server");
    let on_second: i64 = sallyport_tests::postgres::client(&second.url())
        .await
        .query_one(
            "SELECT count(*) FROM sallyport_attempts WHERE attempt_id = $1",
            &[&written.attempt_id.as_str()],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(
        on_second, 1,
        "the write went to the server that takes writes"
    );
    eprintln!("writes refused by the read-only server before the journal left it: {refused}");
    // The writes after it go there too.
    for _ in 0..3 {
        journal
            .write_intent(&sallyport_tests::postgres::intent())
            .await
            .expect("later writes on the second server");
    }
    // And the listening connection, at its next check (every 5 s): a decision committed on
    // the second server notifies it there.
    let moved = Instant::now();
    wait_for_listener(&second, "the server that takes writes").await;
    eprintln!("the approval listener followed in {:?}", moved.elapsed());
    drop(watch);
}

/// Waits (up to 15 s) until the journal's listening connection is on `cluster` (and on no
/// other server, since each test here runs one journal).
async fn wait_for_listener(cluster: &Cluster, which: &str) {
    let sql = sallyport_tests::postgres::client(&cluster.url()).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let listening: i64 = sql
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = 'sallyport-approval-listener'",
                &[],
            )
            .await
            .expect("pg_stat_activity")
            .get(0);
        if listening == 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the approval listener never connected to {which}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
