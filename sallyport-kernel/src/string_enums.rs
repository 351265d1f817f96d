//! The round-trip test of each string enum this crate declares (the vocabulary's own are
//! tested in `sallyport-vocab`), and the audit record's JSON, which is hashed as stored.

use crate::drift::probe::{ProbeClass, ProbeEnvironment, ProbeMethod};
use crate::drift::{DriftMode, Verdict};
use crate::executor::ReconcileOutcome;
use crate::journal::BreakKind;
use crate::target::HttpMethod;

// One test per string enum, named after it, pinning its wire names (as they were when each
// table was written by hand) in declaration order.
sallyport_vocab::__string_enum_tests! {
    http_method: HttpMethod = ["DELETE", "GET", "PATCH", "POST", "PUT"];
    reconcile_outcome: ReconcileOutcome = ["completed", "rejected", "unknown"];
    probe_method: ProbeMethod = ["GET", "HEAD"];
    probe_class: ProbeClass = [
        "denied", "effective_permission_expansion", "inconclusive", "malformed",
        "network_failure", "not_found", "rate_limited", "skipped", "upstream_error",
    ];
    break_kind: BreakKind = [
        "edited", "deleted", "inserted", "reordered", "malformed", "head_mismatch",
        "bad_signature", "unsigned", "attempt_edited",
    ];
    probe_environment: ProbeEnvironment = ["production", "non_production"];
    drift_mode: DriftMode = ["strict", "warn", "shadow"];
    // The payload guard's `Verdict`, apart from the approval's of the same name.
    payload_verdict: Verdict = ["clean", "denied", "warned", "shadowed"];
}

mod audit {
    use crate::code::{Code, ConsentOutcome, RefusalCode, UpstreamCode};

    /// Audit records are hashed as stored: an event read from a journal written before the
    /// codes were typed must serialize to the very same bytes, or its chain would break.
    #[test]
    fn an_audit_event_serializes_to_the_same_json_as_before_the_codes_were_typed() {
        use crate::journal::AuditEvent;
        let stored = [
            (
                r#"{"receipt_id":"rcpt_01J0000000000000000000000","attempt_id":"att_01J0000000000000000000000","at":"2026-01-01T00:00:00Z","session_id":"chat-7","action":"create_invoice","definition_hash":"ab12","phase":"finished","status":"unknown","origin":"upstream","code":"timeout_after_send","reason":"sent, no response; do not retry","objects":[{"kind":"customer","field":"customer_id","value":"cus_7"}],"note":"monthly run","request":"POST https://billing.example/v1/invoices","consent":"approved","dispatches":1,"upstream_status":504}"#,
                Some(Code::Upstream(UpstreamCode::TimeoutAfterSend)),
                Some(ConsentOutcome::Approved),
            ),
            (
                r#"{"receipt_id":"rcpt_2","attempt_id":"att_2","at":"2026-01-01T00:00:01Z","session_id":"chat-7","action":"delete_user","phase":"refused","status":"rejected","origin":"executor","code":"consent_denied","reason":"the human said no; nothing was sent","consent":"approved_for_session","dispatches":0}"#,
                Some(Code::Refusal(RefusalCode::ConsentDenied)),
                Some(ConsentOutcome::ApprovedForSession),
            ),
            (
                r#"{"receipt_id":"rcpt_3","attempt_id":"att_3","at":"2026-01-01T00:00:02Z","session_id":"chat-8","action":"cancel_order","phase":"finished","status":"rejected","origin":"upstream","code":"order_locked","consent":"too_large_to_show","dispatches":1,"upstream_status":200}"#,
                Some(Code::from("order_locked")),
                Some(ConsentOutcome::TooLargeToShow),
            ),
            (
                r#"{"receipt_id":"rcpt_4","attempt_id":"att_4","at":"2026-01-01T00:00:03Z","session_id":"s","action":"read","phase":"finished","status":"completed","dispatches":1}"#,
                None,
                None,
            ),
        ];
        for (json, code, consent) in stored {
            let event: AuditEvent = serde_json::from_str(json).unwrap();
            assert_eq!(event.code, code, "{json}");
            assert_eq!(event.consent, consent, "{json}");
            assert_eq!(serde_json::to_string(&event).unwrap(), json);
        }
    }
}
