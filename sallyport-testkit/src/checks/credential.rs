//! Check 6: the upstream answers `401` (echoing the credential it received). The call stops
//! after that one request, and the next call is refused locally, sending nothing, until a
//! human replaces the credential.

use sallyport_core::Status;

use super::{Subject, not_run, requests};
use crate::report::{Check, CheckReport};
use crate::rig::{Answer, Rig, leaks, outcome};
use crate::upstream::Fault;

pub(super) async fn revoked(s: &Subject<'_>) -> CheckReport {
    let check = Check::RevokedCredential;
    let Some(credential) = s.spec.credential.as_deref() else {
        return CheckReport::not_applicable(
            check,
            "the action binds no credential (`credential = \"…\"`)",
        );
    };
    let rig = match Rig::start(s.env, Fault::Unauthorized, Answer::Approve).await {
        Ok(rig) => rig,
        Err(e) => return not_run(check, &e),
    };
    let first = rig
        .call(s.env, s.name(), s.arguments.clone(), &s.session(check))
        .await;
    let after_first = rig.upstream.requests();
    let asked_first = rig.asked().len();
    let second = rig
        .call(s.env, s.name(), s.arguments.clone(), &s.session(check))
        .await;
    let after_second = rig.upstream.requests();
    let asked_second = rig.asked().len() - asked_first;
    let leaked = leaks(
        s.env,
        &format!("{}\n{}", first.to_json(), second.to_json()),
        true,
    );
    let mut observed = format!(
        "`{credential}` rejected with 401: first call {}, the server saw {}; second call {}, \
         the server saw {} in all, consent asked {asked_second} times for it",
        outcome(&first),
        requests(after_first),
        outcome(&second),
        requests(after_second)
    );
    if !leaked.is_empty() {
        observed.push_str(&format!(
            "; LEAKED: {} (echoed in the 401) reached the result",
            leaked.join(" and ")
        ));
    }
    let stopped = first.status == Status::Rejected
        && first.code_str() == Some("auth_failed")
        && after_first == 1;
    let refused = second.status == Status::Rejected
        && second.code_str() == Some("credential_unavailable")
        && after_second == 1
        && asked_second == 0;
    if stopped && refused && leaked.is_empty() {
        CheckReport::passed(check, observed)
    } else if !leaked.is_empty() {
        CheckReport::failed(
            check,
            observed,
            "declare `message_field` only for a field that holds a short human message; \
             error bodies must never reach the agent unfiltered",
        )
    } else {
        CheckReport::failed(
            check,
            observed,
            "a 401/403 must stop the call and mark the credential unusable: do not map 401 or \
             403 to another status in `#[http(status(…) = …)]`, and report \
             `ChannelOutcome::with_credential_rejected` from a custom channel",
        )
    }
}
