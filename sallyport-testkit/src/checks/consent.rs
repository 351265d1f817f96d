//! Checks 3 and 8: a denial sends nothing; consent comes after the static checks and before
//! the request.

use sallyport_core::Status;
use sallyport_core::action::ConsentRule;

use super::{Subject, not_run, requests};
use crate::report::{Check, CheckReport};
use crate::rig::{Answer, Rig, events_of, outcome};
use crate::upstream::Fault;

fn no_consent(check: Check) -> CheckReport {
    CheckReport::not_applicable(
        check,
        "the consent rule is `none`: nobody is asked for this action",
    )
}

/// Consent denied: `rejected` / `consent_denied`, nothing sent, audited as such.
pub(super) async fn denied(s: &Subject<'_>) -> CheckReport {
    let check = Check::ConsentDenied;
    if s.spec.consent == ConsentRule::None {
        return no_consent(check);
    }
    let rig = match Rig::start(s.env, Fault::Answer(200, s.success_body()), Answer::Deny).await {
        Ok(rig) => rig,
        Err(e) => return not_run(check, &e),
    };
    let session = s.session(check);
    let result = rig
        .call(s.env, s.name(), s.arguments.clone(), &session)
        .await;
    let sent = rig.upstream.requests();
    let asked = rig.asked().len();
    let events = match events_of(s.env, &session).await {
        Ok(events) => events,
        Err(e) => return not_run(check, &e),
    };
    let audited = events
        .iter()
        .any(|e| e.code.as_ref().map(|c| c.as_str()) == Some("consent_denied"));
    let observed = format!(
        "consent asked {asked} times, denied: {}; the server saw {}; audit record {}",
        outcome(&result),
        requests(sent),
        if audited {
            "says consent_denied"
        } else {
            "does not say consent_denied"
        }
    );
    if result.status == Status::Rejected
        && result.code_str() == Some("consent_denied")
        && sent == 0
        && asked == 1
        && audited
    {
        CheckReport::passed(check, observed)
    } else {
        CheckReport::failed(
            check,
            observed,
            "a denied call must send nothing: declare the consent rule in `#[action(consent = …)]` \
             and let the executor's consent stage decide (no request built or sent before it)",
        )
    }
}

/// Static refusals ask nobody; an accepted call is asked about before its first request.
pub(super) async fn order(s: &Subject<'_>) -> CheckReport {
    let check = Check::ConsentOrder;
    if s.spec.consent == ConsentRule::None {
        return no_consent(check);
    }
    let rig = match Rig::start(s.env, Fault::Answer(200, s.success_body()), Answer::Approve).await {
        Ok(rig) => rig,
        Err(e) => return not_run(check, &e),
    };
    let mut lines = Vec::new();
    let mut held = true;

    let unknown = rig
        .call(s.env, s.name(), s.with_unknown_field(), &s.session(check))
        .await;
    let asked = rig.asked().len();
    held &= asked == 0 && unknown.status == Status::Rejected;
    lines.push(format!(
        "unknown field: {}, consent asked {asked} times",
        outcome(&unknown)
    ));
    if let Some(kind) = s.scope_kinds().first() {
        let outside = rig
            .call(
                s.env,
                s.name(),
                s.arguments.clone(),
                &s.session_outside(check, kind),
            )
            .await;
        let asked = rig.asked().len();
        held &= asked == 0 && outside.status == Status::Rejected;
        lines.push(format!(
            "outside the scope: {}, consent asked {asked} times",
            outcome(&outside)
        ));
    }
    let before = rig.upstream.requests();
    held &= before == 0;

    let valid = rig
        .call(s.env, s.name(), s.arguments.clone(), &s.session(check))
        .await;
    let asks = rig.asked();
    let seen = rig.upstream.seen();
    let first_request = seen.first().map(|r| r.at);
    match (asks.as_slice(), first_request) {
        ([ask], Some(request)) => {
            held &= *ask < request;
            lines.push(format!(
                "valid call: {}; consent asked as event {ask}, first request event {request}",
                outcome(&valid)
            ));
        }
        _ => {
            held = false;
            lines.push(format!(
                "valid call: {}; consent asked {} times, the server saw {}",
                outcome(&valid),
                asks.len(),
                requests(seen.len())
            ));
        }
    }
    CheckReport::judged(
        check,
        held,
        &lines,
        "consent must follow every static check and precede the request: keep argument and \
         scope checks in the input schema and `#[scope(…)]` tags, and build the request only \
         in the channel's `prepare`",
    )
}
