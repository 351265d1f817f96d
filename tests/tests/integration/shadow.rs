//! A candidate policy in shadow beside the enforced one (`ExecutorBuilder::shadow_policy`),
//! through a real executor, a real SQLite journal and a request-counting HTTP upstream on
//! 127.0.0.1:0: a candidate that would deny `delete_item` is reported on every call it would
//! change and changes none (a hand-written one and a Cedar one); a panicking candidate changes
//! nothing either; a record without a candidate has no `shadow` field.

use sallyport_core::code::RefusalCode;
use sallyport_core::executor::BuildError;
use sallyport_core::journal::{Journal, SqliteJournal};
use sallyport_core::policy::CallCounts;
use sallyport_core::{Catalog, Executor, Status};
use sallyport_tests::http_server::audit_event;
use sallyport_tests::shadow_rig::{self, Recording, Rule, Seen, ShadowRig};
use serde_json::{Value, json};

fn no_delete_flip() -> Value {
    json!({
        "name": "no-deletes",
        "decision": "deny",
        "reason": "items are never deleted",
        "rules": ["no-delete"],
        "flip": true,
    })
}

fn no_flip(name: &str) -> Value {
    json!({"name": name, "decision": "allow", "rules": ["anyone"], "flip": false})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_that_would_deny_delete_item_reports_every_delete_and_changes_no_call() {
    let enforced = Recording::new("allow-all", Rule::AllowAll);
    let candidate = Recording::new("no-deletes", Rule::NoDeletes);
    let rig = ShadowRig::start(enforced.clone(), Some(candidate.clone() as _), false).await;
    let results = rig.run_script().await;

    // Every call went through as the enforced policy decided: seven requests upstream.
    assert_eq!(rig.upstream.requests(), 7);
    let mut flips = 0;
    for (action, result) in &results {
        assert_eq!(result.status, Status::Completed, "{}", result.summary());
        let event = audit_event(&rig.journal, result.attempt_id.as_str());
        assert_eq!(
            event["policy"],
            json!({"name": "allow-all", "decision": "allow", "rules": ["anyone"]}),
            "{action}"
        );
        if *action == "delete_item" {
            assert_eq!(event["shadow"], no_delete_flip());
            flips += 1;
        } else {
            assert_eq!(event["shadow"], no_flip("no-deletes"), "{action}");
        }
    }
    assert_eq!(flips, 3);
    // Each received request is the call's: three DELETEs reached the upstream.
    let deletes = rig
        .upstream
        .received()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count();
    assert_eq!(deletes, 3);

    // The candidate decided every call on exactly what the enforced policy saw: the same
    // counts (from the journal's shared store) and recent calls; it counted nothing itself,
    // so the second delete of `s1` sees one earlier delete, not two.
    let seen = enforced.seen();
    assert_eq!(candidate.seen(), seen);
    assert_eq!(seen.len(), 7);
    assert_eq!(
        seen[4],
        Seen {
            session: "s1".into(),
            action: "delete_item".into(),
            calls: CallCounts::new(1, 1, 1),
            recent: 4,
        }
    );
    assert_eq!(
        seen[6].calls,
        CallCounts::new(0, 0, 0),
        "s2 has its own counts"
    );

    // The chain still verifies with the new field in it.
    let journal = SqliteJournal::open(&rig.journal).expect("journal");
    let report = journal.verify().await.expect("verify");
    assert!(report.first_break.is_none(), "{report:?}");
    assert_eq!(report.head.count, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_candidate_is_recorded_as_failed_and_changes_nothing() {
    for local_counts in [false, true] {
        let enforced = Recording::new("allow-all", Rule::AllowAll);
        let candidate = Recording::new("falls-over", Rule::Panics);
        let rig =
            ShadowRig::start(enforced.clone(), Some(candidate.clone() as _), local_counts).await;
        let results = rig.run_script().await;
        assert_eq!(rig.upstream.requests(), 7, "local counts: {local_counts}");
        for (action, result) in &results {
            assert_eq!(result.status, Status::Completed, "{}", result.summary());
            let event = audit_event(&rig.journal, result.attempt_id.as_str());
            assert_eq!(event["policy"]["decision"], "allow");
            assert_eq!(
                event["shadow"],
                json!({
                    "name": "falls-over",
                    "flip": false,
                    "failed": format!("panicked: the candidate fell over on {action}"),
                }),
                "local counts: {local_counts}"
            );
        }
        // The enforced policy counted every call although the candidate never finished one.
        let seen = enforced.seen();
        assert_eq!(seen[4].calls, CallCounts::new(1, 1, 1));
        assert_eq!(candidate.seen().len(), 7);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_enforced_policy_denies_carries_the_candidates_flip_on_its_refusal() {
    let enforced = Recording::new("frozen", Rule::NoUpdates);
    let candidate = Recording::new("no-deletes", Rule::NoDeletes);
    let rig = ShadowRig::start(enforced, Some(candidate as _), false).await;
    let results = rig.run_script().await;
    let (_, update) = &results[1];
    assert_eq!(update.status, Status::Rejected);
    assert_eq!(update.code, Some(RefusalCode::PolicyDenied.into()));
    // Only the update was refused; the deletes the candidate would refuse went through.
    assert_eq!(rig.upstream.requests(), 6);
    let event = audit_event(&rig.journal, update.attempt_id.as_str());
    assert_eq!(event["policy"]["decision"], "deny");
    assert_eq!(
        event["shadow"],
        json!({"name": "no-deletes", "decision": "allow", "rules": ["anyone"], "flip": true})
    );
    let (_, delete) = &results[2];
    assert_eq!(delete.status, Status::Completed);
    assert_eq!(
        audit_event(&rig.journal, delete.attempt_id.as_str())["shadow"],
        no_delete_flip()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_candidate_records_have_no_shadow_field() {
    let rig = ShadowRig::start(Recording::new("allow-all", Rule::AllowAll), None, false).await;
    let results = rig.run_script().await;
    assert_eq!(rig.upstream.requests(), 7);
    for (_, result) in &results {
        let event = audit_event(&rig.journal, result.attempt_id.as_str());
        assert_eq!(event["policy"]["decision"], "allow");
        assert_eq!(event.get("shadow"), None);
    }
}

#[test]
fn a_candidate_without_an_enforced_policy_is_a_build_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let error = Executor::builder(Catalog::builder().build().expect("catalog"))
        .journal(SqliteJournal::open(dir.path().join("j.db")).expect("journal"))
        .shadow_policy(Recording::new("no-deletes", Rule::NoDeletes))
        .build()
        .expect_err("no enforced policy");
    assert!(matches!(error, BuildError::ShadowWithoutPolicy), "{error}");
}

/// A Cedar candidate: allows everything but `delete_item`.
const NO_DELETES_CEDAR: &str = r#"
@id("anyone")
permit (principal, action, resource);

@id("no-delete")
@reason("items are never deleted")
forbid (principal, action == Action::"delete_item", resource);
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cedar_candidate_in_shadow_flags_the_deletes_it_would_forbid_and_changes_nothing() {
    let candidate = sallyport_cedar::CedarPolicy::from_text(
        &shadow_rig::catalog(),
        "items-v2.cedar",
        NO_DELETES_CEDAR,
    )
    .expect("policies");
    let rig = ShadowRig::start(
        Recording::new("allow-all", Rule::AllowAll),
        Some(std::sync::Arc::new(candidate) as _),
        false,
    )
    .await;
    let results = rig.run_script().await;
    assert_eq!(rig.upstream.requests(), 7);
    // The script deletes it_1, it_2 and it_3, in that order.
    let mut deleted = ["it_1", "it_2", "it_3"].into_iter();
    for (action, result) in &results {
        assert_eq!(result.status, Status::Completed, "{}", result.summary());
        let shadow = &audit_event(&rig.journal, result.attempt_id.as_str())["shadow"];
        assert_eq!(shadow["name"], "items-v2.cedar");
        if *action == "delete_item" {
            assert_eq!(shadow["decision"], "deny", "{shadow}");
            assert_eq!(shadow["rules"], json!(["no-delete"]), "{shadow}");
            let item = deleted.next().expect("three deletes");
            assert_eq!(
                shadow["reason"],
                format!("items are never deleted for item {item}"),
                "{shadow}"
            );
            assert_eq!(shadow["flip"], true);
        } else {
            assert_eq!(shadow["decision"], "allow", "{shadow}");
            assert_eq!(shadow["flip"], false);
        }
    }
    assert_eq!(deleted.next(), None);
}
