//! Checks 1 and 2: the static refusals (an unknown field, an object outside the session's
//! scope) send nothing and ask nobody.

use sallyport_core::Status;

use super::{OUTSIDE, Subject, UNKNOWN_FIELD, not_run, requests};
use crate::report::{Check, CheckReport};
use crate::rig::{Answer, Rig, outcome};
use crate::upstream::Fault;

/// An unknown field is refused with `invalid_arguments`, nothing is sent, nobody is asked.
pub(super) async fn unknown_field(s: &Subject<'_>) -> CheckReport {
    let check = Check::UnknownField;
    let rig = match Rig::start(s.env, Fault::Answer(200, s.success_body()), Answer::Approve).await {
        Ok(rig) => rig,
        Err(e) => return not_run(check, &e),
    };
    let session = s.session(check);
    let result = rig
        .call(s.env, s.name(), s.with_unknown_field(), &session)
        .await;
    let sent = rig.upstream.requests();
    let asked = rig.asked().len();
    let observed = format!(
        "`{UNKNOWN_FIELD}` added: {}; the server saw {}; consent asked {asked} times",
        outcome(&result),
        requests(sent)
    );
    if result.status == Status::Rejected
        && result.code_str() == Some("invalid_arguments")
        && sent == 0
        && asked == 0
    {
        CheckReport::passed(check, observed)
    } else {
        CheckReport::failed(
            check,
            observed,
            "refuse unknown fields: keep `#[serde(deny_unknown_fields)]` on the input struct, \
             an input schema with `additionalProperties: false`, and the payload drift mode `strict`",
        )
    }
}

/// Each scope kind the action's fields name: an object outside the session's scope is
/// refused with `out_of_scope`, nothing is sent, nobody is asked.
pub(super) async fn out_of_scope(s: &Subject<'_>) -> CheckReport {
    let check = Check::OutOfScope;
    let kinds = s.scope_kinds();
    if kinds.is_empty() {
        return CheckReport::not_applicable(
            check,
            "no input field is tagged `#[scope(…)]`, so a session cannot limit the objects this \
             action touches (tag the field that names the object, if there is one)",
        );
    }
    let mut lines = Vec::new();
    let mut held = true;
    for kind in &kinds {
        let rig =
            match Rig::start(s.env, Fault::Answer(200, s.success_body()), Answer::Approve).await {
                Ok(rig) => rig,
                Err(e) => return not_run(check, &e),
            };
        let session = s.session_outside(check, kind);
        let result = rig
            .call(s.env, s.name(), s.arguments.clone(), &session)
            .await;
        let sent = rig.upstream.requests();
        let asked = rig.asked().len();
        held &= result.status == Status::Rejected
            && result.code_str() == Some("out_of_scope")
            && sent == 0
            && asked == 0;
        lines.push(format!(
            "session allows only {kind} `{OUTSIDE}`: {}, the server saw {}, consent asked {asked} times",
            outcome(&result),
            requests(sent)
        ));
    }
    CheckReport::judged(
        check,
        held,
        &lines,
        "make the scoped field name the object the call touches (`#[scope(kind)]` on the \
         field that is sent), so the executor can refuse objects outside the session",
    )
}
