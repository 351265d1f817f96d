//! Check 7: the agent's side drops the call's future mid-flight. Dropped while consent is
//! pending, the audit record says `cancelled_before_send` and the server saw nothing;
//! dropped while the server holds the request, it says `cancelled_unknown` (`unknown`) and
//! the server saw one request.

use std::time::Duration;

use sallyport_core::Status;
use sallyport_core::action::ConsentRule;
use sallyport_core::journal::Phase;

use super::{Subject, not_run, requests, wait_until};
use crate::report::{Check, CheckReport};
use crate::rig::{Answer, Rig, outcome, wait_for_event};
use crate::upstream::Fault;

/// How long the bench waits for the moment to drop the call.
const WAIT: Duration = Duration::from_secs(10);

/// One drop: the expected phase and status, what the server saw, and the line to report.
async fn drop_when(
    s: &Subject<'_>,
    fault: Fault,
    answer: Answer,
    label: &str,
    expected: (Phase, Status, usize),
) -> Result<(bool, String), String> {
    let rig = Rig::start(s.env, fault, answer).await?;
    let session = s.session(Check::DroppedCall);
    let mut call = Box::pin(rig.call(s.env, s.name(), s.arguments.clone(), &session));
    let moment = async {
        match answer {
            Answer::Hang => wait_until(WAIT, || !rig.asked().is_empty()).await,
            _ => wait_until(WAIT, || rig.upstream.requests() > 0).await,
        }
    };
    let finished = tokio::select! {
        result = &mut call => Some(result),
        reached = moment => {
            if !reached {
                return Ok((false, format!("{label}: the moment to drop the call never came")));
            }
            None
        }
    };
    drop(call);
    if let Some(result) = finished {
        return Ok((
            false,
            format!(
                "{label}: the call finished before it could be dropped ({})",
                outcome(&result)
            ),
        ));
    }
    let events = wait_for_event(s.env, &session).await?;
    let sent = rig.upstream.requests();
    let Some(event) = events.last() else {
        return Ok((
            false,
            format!(
                "{label}: no audit record within 5 s; the server saw {}",
                requests(sent)
            ),
        ));
    };
    let (phase, status, count) = expected;
    let held = event.phase == phase && event.status == status && sent == count;
    Ok((
        held,
        format!(
            "{label}: audit record {} ({}), the server saw {}",
            event.phase.as_str(),
            event.status,
            requests(sent)
        ),
    ))
}

pub(super) async fn recorded(s: &Subject<'_>) -> CheckReport {
    let check = Check::DroppedCall;
    let mut lines = Vec::new();
    let mut held = true;
    if s.spec.consent != ConsentRule::None {
        match drop_when(
            s,
            Fault::Answer(200, s.success_body()),
            Answer::Hang,
            "dropped while consent was pending",
            (Phase::CancelledBeforeSend, Status::Rejected, 0),
        )
        .await
        {
            Ok((ok, line)) => {
                held &= ok;
                lines.push(line);
            }
            Err(e) => return not_run(check, &e),
        }
    }
    match drop_when(
        s,
        Fault::CommitThenHang,
        Answer::Approve,
        "dropped while the server held the request",
        (Phase::CancelledUnknown, Status::Unknown, 1),
    )
    .await
    {
        Ok((ok, line)) => {
            held &= ok;
            lines.push(line);
        }
        Err(e) => return not_run(check, &e),
    }
    CheckReport::judged(
        check,
        held,
        &lines,
        "a dropped call must be recorded: a custom channel must take a `SendPermit` and call \
         `sending()` right before the request leaves, and must not send from a task that \
         outlives the call",
    )
}
