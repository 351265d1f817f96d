//! Remembered approvals in the console, over the real router on a real listener, a real
//! executor and SQLite journal, and an upstream that counts requests: "approve and remember"
//! from the card lets the identical call go unasked; revoking from the console (with the
//! session's CSRF token) stops the next call; an `irreversible_or_broad` action is never
//! offered it, and a forged post is refused with nothing decided.

use crate::common;

use sallyport_core::Session;
use sallyport_core::approval::{ApprovalState, ApprovalStep};
use sallyport_core::code::ConsentOutcome;
use sallyport_core::{RefusalCode, Status};
use sallyport_tests::approvals_rig;
use serde_json::json;

use common::rig;

fn elsewhere(name: &str) -> Session {
    Session::new(name)
        .requested_by("billing-bot")
        .allow_any("customer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_and_remember_from_the_console_then_revoke_it_from_the_console() {
    let rig = rig().await;
    let id = rig.park(1, "month-end").await;
    let (cookie, csrf) = rig.login().await;

    let card = rig
        .get(&format!("/approvals/{}", id.as_str()), Some(&cookie))
        .await;
    assert_eq!(card.status, 200);
    let action = format!("action=\"/approvals/{}/remember\"", id.as_str());
    assert!(card.body.contains(&action), "{}", card.body);
    assert!(card.body.contains("Approve and remember"));

    // Without the session's token: refused, nothing decided.
    let remember = format!("/approvals/{}/remember", id.as_str());
    let forged = rig
        .post(
            &remember,
            Some(&cookie),
            &[("csrf", "nope"), ("scope", "exact")],
        )
        .await;
    assert_eq!(forged.status, 403);
    let forged = rig.post(&remember, None, &[("scope", "exact")]).await;
    assert_eq!(forged.status, 401);
    assert_eq!(
        rig.store().approval(&id).await.unwrap().unwrap().state,
        ApprovalState::Awaiting
    );

    let done = rig
        .post(
            &remember,
            Some(&cookie),
            &[("csrf", &csrf), ("scope", "exact")],
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(rig.posts(), 1, "the approved call itself is sent once");
    let listed = rig.store().remembered_approvals(None).await.unwrap();
    assert_eq!(listed.len(), 1);
    let r = listed[0].clone();
    assert_eq!(r.created_by.by, "alice");
    assert_eq!(r.created_by.channel, "console");

    // The identical call, from another session: sent without asking, saying why.
    let again = rig
        .executor
        .call("send_invoice", with_reason(1), &elsewhere("agent-5"))
        .await;
    assert_eq!(again.status, Status::Completed, "{}", again.to_json());
    assert_eq!(again.remembered_approval.as_ref(), Some(&r.remembered_id));
    assert_eq!(rig.posts(), 2);

    let page = rig.get("/remembered", Some(&cookie)).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(r.remembered_id.as_str()),
        "{}",
        page.body
    );
    assert!(page.body.contains("exact arguments"), "{}", page.body);
    let revoke = format!("/remembered/{}/revoke", r.remembered_id.as_str());
    assert!(
        page.body.contains(&format!("action=\"{revoke}\"")),
        "{}",
        page.body
    );

    // A revocation without the token changes nothing.
    let forged = rig.post(&revoke, Some(&cookie), &[("csrf", "")]).await;
    assert_eq!(forged.status, 403);
    let forged = rig.post(&revoke, None, &[("csrf", &csrf)]).await;
    assert_eq!(forged.status, 401);
    let still = rig
        .executor
        .call("send_invoice", with_reason(1), &elsewhere("agent-6"))
        .await;
    assert_eq!(still.status, Status::Completed, "{}", still.to_json());
    assert_eq!(rig.posts(), 3);

    let revoked = rig.post(&revoke, Some(&cookie), &[("csrf", &csrf)]).await;
    assert_eq!(revoked.status, 303);
    assert_eq!(revoked.header("location"), Some("/remembered?done=revoked"));

    // The next identical call is asked again: parked, nothing sent.
    let next = rig
        .executor
        .call("send_invoice", with_reason(1), &elsewhere("agent-7"))
        .await;
    assert_eq!(next.status, Status::Pending, "{}", next.to_json());
    assert_eq!(next.code, Some(RefusalCode::AwaitingApproval.into()));
    assert_eq!(rig.posts(), 3);

    let page = rig.get("/remembered?done=revoked", Some(&cookie)).await;
    assert!(page.body.contains("revoked by alice"), "{}", page.body);
    let again = rig.post(&revoke, Some(&cookie), &[("csrf", &csrf)]).await;
    assert_eq!(again.header("location"), Some("/remembered?done=already"));

    // The chain: remembered, each covered call, the revocation, with who and how.
    let records = rig.journal().records().await.unwrap();
    let steps: Vec<(ApprovalStep, Option<String>, Option<String>)> = records
        .iter()
        .filter_map(|rec| rec.event.approval.as_ref())
        .filter(|n| n.remembered.as_ref() == Some(&r.remembered_id))
        .map(|n| (n.step, n.by.clone(), n.channel.clone()))
        .collect();
    let who = || (Some("alice".to_owned()), Some("console".to_owned()));
    assert_eq!(
        steps,
        [
            (ApprovalStep::Remembered, who().0, who().1),
            (ApprovalStep::AppliedRemembered, who().0, who().1),
            (ApprovalStep::AppliedRemembered, who().0, who().1),
            (ApprovalStep::Revoked, who().0, who().1),
        ]
    );
    let applied = records
        .iter()
        .filter(|rec| rec.event.consent == Some(ConsentOutcome::Remembered))
        .count();
    assert_eq!(applied, 2);
    assert!(rig.journal().verify().await.unwrap().is_intact());
}

/// The arguments of invoice `n` with the reason `Rig::park` gives.
fn with_reason(n: usize) -> serde_json::Value {
    let mut args = approvals_rig::invoice(n);
    args["reason"] = json!("month-end");
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_irreversible_action_is_never_offered_approve_and_remember() {
    let rig = crate::confirm::rig().await;
    let parked = rig
        .executor
        .call(
            "delete_customer",
            json!({"customer_id": "cus_9"}),
            &approvals_rig::session(),
        )
        .await;
    let id = parked.approval_id.expect("approval id");
    let (cookie, csrf) = rig.login().await;
    let card = rig
        .get(&format!("/approvals/{}", id.as_str()), Some(&cookie))
        .await;
    assert_eq!(card.status, 200);
    assert!(
        card.body.contains("/decide"),
        "the card is shown: {}",
        card.body
    );
    assert!(!card.body.contains("/remember\""), "{}", card.body);
    assert!(!card.body.contains("Approve and remember"), "{}", card.body);
    let records = rig.journal().records().await.unwrap().len();
    // Posted anyway: refused, nothing decided or audited.
    let refused = rig
        .post(
            &format!("/approvals/{}/remember", id.as_str()),
            Some(&cookie),
            &[("csrf", &csrf), ("scope", "window-1h")],
        )
        .await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains("irreversible_or_broad"),
        "{}",
        refused.body
    );
    assert_eq!(
        rig.store().approval(&id).await.unwrap().unwrap().state,
        ApprovalState::Awaiting
    );
    assert_eq!(rig.journal().records().await.unwrap().len(), records);
    assert!(
        rig.store()
            .remembered_approvals(None)
            .await
            .unwrap()
            .is_empty()
    );
}
