//! A crash-stop of PostgreSQL mid-load (`pg_ctl stop -m immediate`: no checkpoint, no
//! goodbye to clients, as a power cut looks to the database) under real `pg-executor`
//! processes, then the server started again. The server is the test's own (`initdb` in a
//! temporary directory), so stopping it disturbs no other test. Afterwards: every request
//! the upstream received has its intent in the journal (an intent is durable before its
//! request leaves), no request was sent twice, every record an executor kept through the
//! crash was written, and once the reconciler has run no attempt is left unresolved, the
//! journal's send count equals the upstream's, and the chain verifies.

use std::time::{Duration, Instant};

use sallyport_postgres::PostgresJournal;

use super::server_loss::{Deployments, Fleet, check_nothing_lost_or_sent_twice};
use sallyport_tests::cluster::Cluster;

const PROCESSES: usize = 3;
const CALLS: usize = 200;
const IN_FLIGHT: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_stop_of_postgres_mid_load_loses_no_intent_and_sends_nothing_twice() {
    let cluster = Cluster::start("crash", "");
    // The schema, before the executors start.
    drop(
        PostgresJournal::connect(&cluster.url())
            .await
            .expect("journal on the test's server"),
    );
    let deployments = Deployments::start().await;
    let upstream = &deployments.upstream;
    let fleet = Fleet::spawn(&cluster.url(), upstream, PROCESSES, CALLS, IN_FLIGHT);

    // Mid-load: a quarter of the calls sent.
    let quarter = (PROCESSES * CALLS / 4) as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while upstream.requests() < quarter {
        assert!(Instant::now() < deadline, "the executors never got going");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let crashed_at = upstream.requests();
    cluster.crash();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    cluster.pg_ctl_start();

    let answers = fleet.wait().await;
    check_nothing_lost_or_sent_twice(
        &format!("crash-stop after {crashed_at} requests"),
        &cluster.url(),
        &deployments,
        &answers,
    )
    .await;
}
