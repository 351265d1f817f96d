//! Check 5: the upstream returns debug data — the credential it received, a stack trace, an
//! internal URL — in three ways: as extra fields of a success body, as the value of every
//! free string of the declared result, and in a `500` error body. None of it may reach the
//! result, the audit record or the logs.

use sallyport_core::Session;
use serde_json::{Value, json};

use super::{Subject, not_run};
use crate::report::{Check, CheckReport};
use crate::rig::{Answer, Env, INTERNAL_URL, Rig, STACK_TRACE, events_of, leaks, outcome};
use crate::sample::sample_with_strings;
use crate::upstream::Fault;

/// Where a leak was found.
#[derive(Default)]
struct Found {
    result: Vec<&'static str>,
    audit: Vec<&'static str>,
    logs: Vec<&'static str>,
    /// Log lines captured during the calls (all of them searched).
    log_lines: usize,
    /// Audit records of the calls (all of them searched).
    records: usize,
}

impl Found {
    fn is_empty(&self) -> bool {
        self.result.is_empty() && self.audit.is_empty() && self.logs.is_empty()
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (place, what) in [
            ("the result", &self.result),
            ("the audit record", &self.audit),
            ("the logs", &self.logs),
        ] {
            if !what.is_empty() {
                parts.push(format!("{} reached {place}", what.join(" and ")));
            }
        }
        parts.join("; ")
    }
}

fn debug_fields(canary: &str) -> Value {
    json!({
        "debug": {
            "authorization": format!("Bearer {canary}"),
            "trace": STACK_TRACE,
            "upstream": INTERNAL_URL,
        },
        "stack": STACK_TRACE,
        "internal_url": INTERNAL_URL,
        "echo_token": canary,
    })
}

fn with_debug(success: Value, canary: &str) -> Value {
    let extras = debug_fields(canary);
    match (success, extras) {
        (Value::Object(mut body), Value::Object(extras)) => {
            body.extend(extras);
            Value::Object(body)
        }
        (_, extras) => extras,
    }
}

fn error_body(canary: &str) -> Value {
    json!({
        "message": format!("upstream failure at {INTERNAL_URL} for Bearer {canary}\n{STACK_TRACE}"),
        "error": STACK_TRACE,
        "detail": debug_fields(canary),
    })
}

async fn one(
    s: &Subject<'_>,
    label: &str,
    fault: Fault,
    found: &mut Found,
) -> Result<String, String> {
    let env: &Env = s.env;
    let rig = Rig::start(env, fault, Answer::Approve).await?;
    let session: Session = s.session(Check::SensitiveData);
    let mark = env.logs.mark();
    let result = rig.call(env, s.name(), s.arguments.clone(), &session).await;
    let logs = env.logs.since(mark);
    found.log_lines += logs.lines().count();
    let events = events_of(env, &session).await?;
    found.records += events.len();
    let audit = events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    for (into, text) in [
        (&mut found.result, result.to_json()),
        (&mut found.audit, audit),
        (&mut found.logs, logs),
    ] {
        for leak in leaks(env, &text, s.spec.credential.is_some()) {
            if !into.contains(&leak) {
                into.push(leak);
            }
        }
    }
    let sent = rig
        .upstream
        .seen()
        .iter()
        .map(|r| format!("{} {}", r.method, r.target))
        .next()
        .unwrap_or_else(|| "nothing sent".to_owned());
    Ok(format!("{label} ({sent}): {}", outcome(&result)))
}

pub(super) async fn never_leaves(s: &Subject<'_>) -> CheckReport {
    let check = Check::SensitiveData;
    let canary = s.env.canary.as_str();
    let mut found = Found::default();
    let mut lines = Vec::new();
    let mut cases = vec![
        (
            "debug fields beside the result",
            Fault::Answer(200, with_debug(s.success_body(), canary)),
        ),
        (
            "a 500 with a debug body",
            Fault::Answer(500, error_body(canary)),
        ),
    ];
    if s.spec.credential.is_some() {
        cases.push((
            "the credential in every free string",
            Fault::Answer(
                200,
                s.http.result.as_ref().map_or_else(
                    || json!({"echo": canary}),
                    |shape| sample_with_strings(&shape.schema, canary),
                ),
            ),
        ));
    }
    for (label, fault) in cases {
        match one(s, label, fault, &mut found).await {
            Ok(line) => lines.push(line),
            Err(e) => return not_run(check, &e),
        }
    }
    let calls = lines.len();
    if s.spec.credential.is_none() {
        lines.push("no credential is bound, so none was echoed".to_owned());
    }
    let mut observed = lines.join("; ");
    if found.records < calls {
        observed.push_str(&format!(
            "; only {} audit records for {calls} calls",
            found.records
        ));
        return CheckReport::failed(
            check,
            observed,
            "every call must leave an audit record: give the executor a journal that is written",
        );
    }
    if found.is_empty() {
        observed.push_str(&format!(
            "; nothing planted reached the results, the {} audit records or the {} log lines",
            found.records, found.log_lines
        ));
        return CheckReport::passed(check, observed);
    }
    observed.push_str(&format!("; LEAKED: {}", found.describe()));
    let fix = if !found.result.is_empty() {
        "declare `result = …` with a typed struct of only the fields the agent needs (no \
         `#[serde(flatten)]` map, no `serde_json::Value`), and `message_field` only for a field \
         that holds a short human message, so the upstream's debug data is dropped"
    } else {
        "the pipeline let planted data into the audit record or the logs: a custom channel or \
         request builder must report reasons through `ChannelOutcome`, never log response bodies"
    };
    CheckReport::failed(check, observed, fix)
}
