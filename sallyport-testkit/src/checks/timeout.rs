//! Check 4: the server commits and never answers. A mutating call must end `unknown`, name
//! the reconcile action, and the server must have seen one request, or the same idempotency
//! key on every resend.

use sallyport_core::Status;
use sallyport_core::action::RetryRule;
use serde_json::Value;

use super::{Subject, not_run, requests};
use crate::report::{Check, CheckReport};
use crate::rig::{Answer, Rig, outcome};
use crate::upstream::Fault;

pub(super) async fn after_commit(s: &Subject<'_>) -> CheckReport {
    let check = Check::TimeoutAfterCommit;
    if !s.spec.effect.is_mutating() {
        return CheckReport::not_applicable(
            check,
            "an observe action changes nothing upstream, so a lost answer has nothing to reconcile",
        );
    }
    let rig = match Rig::start(s.env, Fault::CommitThenHang, Answer::Approve).await {
        Ok(rig) => rig,
        Err(e) => return not_run(check, &e),
    };
    let session = s.session(check);
    let started = std::time::Instant::now();
    let result = rig
        .call(s.env, s.name(), s.arguments.clone(), &session)
        .await;
    let elapsed = started.elapsed();
    let seen = rig.upstream.seen();
    let first_key = seen.first().and_then(|r| r.idempotency_key.clone());
    let same_key = first_key.is_some() && seen.iter().all(|r| r.idempotency_key == first_key);
    let mut observed = format!(
        "the server committed and did not answer (timeout {} ms): {} after {} ms; the server saw {}",
        s.timeout().as_millis(),
        outcome(&result),
        elapsed.as_millis(),
        requests(seen.len())
    );
    if seen.len() > 1 {
        observed.push_str(if same_key {
            ", all with the same idempotency key"
        } else {
            ", NOT all with one idempotency key"
        });
    }
    match &result.next {
        Some(next) => {
            observed.push_str(&format!("; next: {} {}", next.action, next.arguments));
            let missing = missing_required(s, &next.action, &next.arguments);
            if !missing.is_empty() {
                observed.push_str(&format!(
                    " (the agent must still find {}: the arguments do not give it)",
                    missing.join(", ")
                ));
            }
        }
        None => observed.push_str("; no next action"),
    }

    let Some(reconcile) = s.spec.reconcile.as_deref() else {
        return CheckReport::failed(
            check,
            observed,
            "declare a reconcile action: `reconcile = \"…\"` in `#[action(…)]`, naming an \
             observe action that finds the object, so the agent checks an unknown outcome \
             instead of calling again",
        );
    };
    if seen.len() > 1 && !same_key {
        let fix = if s.spec.retry == RetryRule::IdempotencyKey {
            "the server saw resends without one idempotency key: check the channel's \
             idempotency header matches what the upstream honours"
        } else {
            "a mutating call was resent without an idempotency key: declare \
             `retry = idempotency_key` only where the upstream honours the key, else `retry = never`"
        };
        return CheckReport::failed(check, observed, fix);
    }
    if seen.is_empty() {
        return CheckReport::failed(
            check,
            observed,
            "the call never reached the upstream: check the action's template and example",
        );
    }
    if result.status != Status::Unknown {
        return CheckReport::failed(
            check,
            observed,
            "a request the server committed without answering must end `unknown`: do not map \
             the timeout to another status in the action's status rules",
        );
    }
    if result.next.as_ref().map(|n| n.action.as_str()) != Some(reconcile) {
        return CheckReport::failed(
            check,
            observed,
            format!("the unknown result must name the reconcile action `{reconcile}` in `next`"),
        );
    }
    CheckReport::passed(check, observed)
}

/// The required input fields of action `name` that `arguments` lacks.
fn missing_required(s: &Subject<'_>, name: &str, arguments: &Value) -> Vec<String> {
    let Some(entry) = s.env.catalog.get(name) else {
        return Vec::new();
    };
    entry
        .input_schema()
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|field| arguments.get(*field).is_none())
        .map(|field| format!("`{field}`"))
        .collect()
}
