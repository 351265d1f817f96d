//! The demo catalog passes the sallyport bench, and the bench catches real mistakes: a
//! mutating action without a reconcile action, a result that keeps every field the upstream
//! sends, an action the bench has no valid arguments for.

use sallyport_core::Catalog;
use sallyport_examples::catalog::demo_catalog;
use sallyport_testkit::{Check, Report, Verdict};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

fn verdict<'r>(report: &'r Report, action: &str, check: Check) -> &'r Verdict {
    &report
        .action(action)
        .unwrap_or_else(|| panic!("no report for {action}:\n{report}"))
        .check(check)
        .unwrap_or_else(|| panic!("no {check} for {action}:\n{report}"))
        .verdict
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_catalog_passes_the_bench_in_three_lines() {
    let catalog = demo_catalog().expect("catalog");
    let report = sallyport_testkit::bench(&catalog).run().await;
    println!("{report}");
    report.assert_passed();

    // Every check ran where it applies, and only there.
    for mutating in ["create_preview_deployment", "create_invoice"] {
        for check in [
            Check::Arguments,
            Check::UnknownField,
            Check::OutOfScope,
            Check::ConsentDenied,
            Check::TimeoutAfterCommit,
            Check::SensitiveData,
            Check::RevokedCredential,
            Check::DroppedCall,
            Check::ConsentOrder,
        ] {
            assert_eq!(
                verdict(&report, mutating, check),
                &Verdict::Passed,
                "{mutating} {check}:\n{report}"
            );
        }
    }
    for observe in ["list_builds", "get_deployment_status", "get_invoice"] {
        for check in [
            Check::TimeoutAfterCommit,
            Check::ConsentDenied,
            Check::ConsentOrder,
        ] {
            assert!(
                matches!(
                    verdict(&report, observe, check),
                    Verdict::NotApplicable { .. }
                ),
                "{observe} {check}:\n{report}"
            );
        }
        for check in [
            Check::UnknownField,
            Check::OutOfScope,
            Check::SensitiveData,
            Check::RevokedCredential,
            Check::DroppedCall,
        ] {
            assert_eq!(
                verdict(&report, observe, check),
                &Verdict::Passed,
                "{observe} {check}:\n{report}"
            );
        }
    }
    // What was observed is in the report: the idempotent invoice was resent with one key.
    let invoice = report.action("create_invoice").expect("create_invoice");
    let timeout = invoice.check(Check::TimeoutAfterCommit).expect("timeout");
    assert!(
        timeout.observed.contains("unknown/timeout_after_send")
            && timeout.observed.contains("next: get_invoice"),
        "{}",
        timeout.observed
    );
    let text = report.to_string();
    assert!(text.starts_with("sallyport bench: 5 actions; "), "{text}");
    assert!(text.contains("journal verified intact"), "{text}");
}

/// Refund one invoice. The mistake: it commits money and declares no reconcile action, so
/// after a lost answer the agent has no way to check and will be tempted to call again.
#[derive(Debug, sallyport_core::Action, Deserialize, Serialize, JsonSchema)]
#[action(
    name = "refund_invoice",
    effect = external_commitment,
    credential = "demo-api"
)]
#[http(post = "/v1/invoices/{invoice_id}/refunds", result = Refund)]
#[serde(deny_unknown_fields)]
struct RefundInvoice {
    /// The invoice.
    #[scope(invoice)]
    #[schemars(regex(pattern = r"^inv_[0-9]+$"))]
    invoice_id: String,
}

/// A refund.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Refund {
    /// The refund id.
    refund_id: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutating_action_without_a_reconcile_action_fails_with_the_fix() {
    let catalog = Catalog::builder()
        .action::<RefundInvoice>()
        .build()
        .expect("catalog");
    let report = sallyport_testkit::bench(&catalog)
        .example("refund_invoice", json!({"invoice_id": "inv_5001"}))
        .run()
        .await;
    println!("{report}");
    assert!(!report.passed(), "{report}");
    let failures: Vec<_> = report
        .failures()
        .map(|(a, c)| (a.action.as_str(), c.check))
        .collect();
    assert_eq!(
        failures,
        [("refund_invoice", Check::TimeoutAfterCommit)],
        "{report}"
    );
    let text = report.to_string();
    assert!(
        text.contains("FAIL  refund_invoice / timeout_after_commit_is_unknown: the server committed and did not answer"),
        "{text}"
    );
    assert!(
        text.contains("fix: declare a reconcile action: `reconcile = \"…\"`"),
        "{text}"
    );
    // The rest of the bench still held for it.
    assert_eq!(
        verdict(&report, "refund_invoice", Check::SensitiveData),
        &Verdict::Passed
    );
    let panic = std::panic::catch_unwind(|| report.assert_passed()).expect_err("panics");
    let message = panic.downcast_ref::<String>().expect("a formatted message");
    assert!(
        message.starts_with("the sallyport bench failed:\n")
            && message.contains("declare a reconcile action"),
        "{message}"
    );
}

/// Read one customer's profile. The mistake: the result keeps every field the upstream
/// sends (a flattened map), so whatever debug data the upstream adds reaches the agent.
#[derive(Debug, sallyport_core::Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_customer", effect = observe, credential = "demo-api")]
#[http(get = "/v1/customers/{customer_id}", result = Everything)]
#[serde(deny_unknown_fields)]
struct GetCustomer {
    /// The customer.
    #[scope(customer)]
    #[schemars(regex(pattern = r"^cus_[A-Za-z0-9]+$"))]
    customer_id: String,
}

/// Every field of the upstream's answer.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Everything {
    /// Whatever came.
    #[serde(flatten)]
    fields: Map<String, Value>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_that_keeps_every_upstream_field_leaks_and_fails_with_the_fix() {
    let catalog = Catalog::builder()
        .action::<GetCustomer>()
        .build()
        .expect("catalog");
    let report = sallyport_testkit::bench(&catalog)
        .example("get_customer", json!({"customer_id": "cus_7"}))
        .run()
        .await;
    println!("{report}");
    let failures: Vec<_> = report
        .failures()
        .map(|(a, c)| (a.action.as_str(), c.check))
        .collect();
    assert_eq!(
        failures,
        [("get_customer", Check::SensitiveData)],
        "{report}"
    );
    let check = report
        .action("get_customer")
        .and_then(|a| a.check(Check::SensitiveData))
        .expect("the check");
    // The scrubber still caught the echoed credential; the stack trace and the internal URL
    // went through the projection untouched.
    assert!(
        check
            .observed
            .contains("LEAKED: the stack trace and the internal URL reached the result"),
        "{}",
        check.observed
    );
    assert!(
        matches!(&check.verdict, Verdict::Failed { fix } if fix.starts_with("declare `result = …` with a typed struct")),
        "{report}"
    );
}

/// Read one billing document. Its id pattern has an alternation, which the bench does not
/// invent values for.
#[derive(Debug, sallyport_core::Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_document", effect = observe, credential = "demo-api")]
#[http(get = "/v1/documents/{document_id}", result = Refund)]
#[serde(deny_unknown_fields)]
struct GetDocument {
    /// An invoice or a credit note, e.g. `cn_12`.
    #[scope(document)]
    #[schemars(regex(pattern = r"^(inv|cn)_[0-9]+$"))]
    document_id: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_the_bench_cannot_invent_arguments_for_asks_for_an_example() {
    let catalog = Catalog::builder()
        .action::<GetDocument>()
        .build()
        .expect("catalog");
    let report = sallyport_testkit::bench(&catalog).run().await;
    let check = report
        .action("get_document")
        .and_then(|a| a.check(Check::Arguments))
        .expect("the arguments check");
    assert!(
        matches!(&check.verdict, Verdict::Failed { fix } if fix.starts_with("add `.example(\"get_document\", json!({…}))` to the bench")),
        "{report}"
    );
    assert!(
        check
            .observed
            .starts_with("a guess from the input schema was refused: invalid_arguments"),
        "{}",
        check.observed
    );
    // Without arguments, no other check of that action is reported (none ran).
    assert_eq!(
        report.action("get_document").expect("report").checks.len(),
        1
    );
    assert!(!report.passed());

    // With the example the agent would send, every check that applies runs and holds.
    let report = sallyport_testkit::bench(&catalog)
        .example("get_document", json!({"document_id": "cn_12"}))
        .run()
        .await;
    report.assert_passed();
    assert_eq!(
        verdict(&report, "get_document", Check::RevokedCredential),
        &Verdict::Passed
    );
}

/// The twelve GitHub actions `sallyport scaffold` wrote (`examples/src/github.rs`, decisions
/// made by hand) go on the same bench. Every check holds but one, and that one is the decision
/// the scaffold leaves to the author: the five state-changing actions declare no reconcile
/// action, so after a lost answer the agent could not check what happened. The report names
/// each and says what to add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scaffolded_github_actions_go_on_the_bench_and_it_names_the_missing_reconcile_actions()
{
    let catalog = sallyport_examples::github::catalog().expect("the GitHub catalog builds");
    let report = sallyport_testkit::bench(&catalog).run().await;
    println!("{report}");
    assert_eq!(report.actions.len(), 12, "{report}");
    let mut failures: Vec<(&str, Check)> = report
        .failures()
        .map(|(a, c)| (a.action.as_str(), c.check))
        .collect();
    failures.sort();
    assert_eq!(
        failures,
        [
            ("issues_create", Check::TimeoutAfterCommit),
            ("issues_create_comment", Check::TimeoutAfterCommit),
            ("issues_update", Check::TimeoutAfterCommit),
            ("pulls_create", Check::TimeoutAfterCommit),
            ("repos_create_release", Check::TimeoutAfterCommit),
        ],
        "{report}"
    );
    for (action, check) in report.failures() {
        assert!(
            matches!(&check.verdict, Verdict::Failed { fix } if fix.contains("declare a reconcile action")),
            "{} {}: {:?}",
            action.action,
            check.check,
            check.verdict
        );
    }
    // What does apply to every action held: unknown fields, leaks, a revoked credential and a
    // dropped call, for reads and writes alike.
    for action in &report.actions {
        for check in [
            Check::Arguments,
            Check::UnknownField,
            Check::SensitiveData,
            Check::RevokedCredential,
            Check::DroppedCall,
        ] {
            assert_eq!(
                action.check(check).map(|c| &c.verdict),
                Some(&Verdict::Passed),
                "{} {check}:\n{report}",
                action.action
            );
        }
    }
    assert_eq!(report.journal_intact, Some(true), "{report}");
}
