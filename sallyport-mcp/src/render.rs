//! The short text rendering of a result that accompanies `structuredContent`.

use sallyport_core::outcome::ActionResult;
use sallyport_core::outcome::{Origin, Status};

/// A plain-language rendering of `result` that tells the model what happened and what to do
/// next, e.g. `create_invoice: unknown (timeout_after_send) — sent, no response. It may or may
/// not have been applied: do not retry; call get_invoice with {…} to find out.`
pub fn render(result: &ActionResult) -> String {
    let mut text = result.headline();
    text.push('.');
    let next = result
        .next
        .as_ref()
        .map(|n| format!("call {} with {}", n.action, n.arguments));
    let advice = match (result.status, result.origin) {
        (Status::Completed, _) => "Done; the data is evidence of the new state.".to_owned(),
        (Status::AlreadyInDesiredState, _) => {
            "Nothing needed doing; do not call it again.".to_owned()
        }
        (Status::Pending, _) => match &next {
            Some(next) => format!("Accepted, not finished: {next} to check on it."),
            None => "Accepted, not finished.".to_owned(),
        },
        (Status::Unknown, _) => match &next {
            Some(next) => {
                format!("It may or may not have been applied: do not retry; {next} to find out.")
            }
            None => "It may or may not have been applied: do not retry; ask the user.".to_owned(),
        },
        (Status::Rejected, Some(Origin::Executor)) => result.refusal_advice().to_owned(),
        (Status::Rejected, _) => {
            "Not applied. Do not retry the same call; tell the user the reason.".to_owned()
        }
    };
    text.push(' ');
    text.push_str(&advice);
    text
}

#[cfg(test)]
mod tests {
    use sallyport_core::outcome::ActionResult;
    use serde_json::json;

    use super::render;

    fn result(value: serde_json::Value) -> ActionResult {
        serde_json::from_value(value).expect("an ActionResult")
    }

    #[test]
    fn an_unknown_result_says_do_not_retry_and_names_the_reconcile_call() {
        let unknown = result(json!({
            "status": "unknown", "action": "create_invoice", "origin": "upstream",
            "code": "timeout_after_send", "reason": "sent, no response",
            "next": {"action": "get_invoice", "arguments": {"customer_id": "cus_7", "reference": "inv-1"}},
            "attempt_id": "att_1"
        }));
        assert_eq!(
            render(&unknown),
            "create_invoice: unknown (timeout_after_send) — sent, no response. It may or may not \
             have been applied: do not retry; call get_invoice with \
             {\"customer_id\":\"cus_7\",\"reference\":\"inv-1\"} to find out."
        );
    }

    #[test]
    fn an_out_of_scope_refusal_says_nothing_was_sent() {
        let refused = result(json!({
            "status": "rejected", "action": "list_builds", "origin": "executor",
            "code": "out_of_scope", "reason": "project proj_999 is outside this session's scope",
            "attempt_id": "att_2"
        }));
        assert_eq!(
            render(&refused),
            "list_builds: rejected (out_of_scope) — project proj_999 is outside this session's \
             scope. Nothing was sent. This session may not touch that object; do not retry with it."
        );
    }
}
