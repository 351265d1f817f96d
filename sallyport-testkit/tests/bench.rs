//! The bench's own behaviour on catalogs it cannot fully run: SSH and custom-channel actions
//! are listed as not applicable (never as passed), beside an HTTP action that it does run.

use sallyport_core::target::{SshTarget, Target};
use sallyport_core::{Action, Catalog};
use sallyport_testkit::{Check, Verdict};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Read one service's status.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "service_status", effect = observe)]
#[http(get = "/v1/services/{service}", result = Service)]
#[serde(deny_unknown_fields)]
struct ServiceStatus {
    /// The service.
    #[scope(service)]
    service: String,
}

/// A service's state.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Service {
    /// `running` or `stopped`.
    state: String,
}

// A current-thread runtime (the `#[tokio::test]` default): the bench needs no second thread.
#[tokio::test]
async fn ssh_and_custom_channel_actions_are_not_applicable_and_http_actions_run() {
    let catalog = Catalog::builder()
        .action::<ServiceStatus>()
        .action_with_spec::<ServiceStatus>(|spec| {
            let mut spec = spec.with_target(Target::Ssh(SshTarget::new(
                "web1",
                ["systemctl", "status", "{service}"],
            )));
            spec.name = "ssh_service_status".into();
            spec
        })
        .action_with_spec::<ServiceStatus>(|spec| {
            let mut spec = spec.with_target(Target::custom("workers", json!({"op": "status"})));
            spec.name = "custom_service_status".into();
            spec
        })
        .build()
        .expect("catalog");
    let report = sallyport_testkit::bench(&catalog).run().await;
    println!("{report}");

    let ssh = report.action("ssh_service_status").expect("ssh action");
    assert_eq!(ssh.channel, "ssh");
    assert_eq!(ssh.checks.len(), Check::ALL.len());
    for check in &ssh.checks {
        assert!(
            matches!(&check.verdict, Verdict::NotApplicable { reason }
                if reason.starts_with("not applicable to SSH in this version")),
            "{report}"
        );
    }
    let custom = report
        .action("custom_service_status")
        .expect("custom action");
    assert!(custom.checks.iter().all(|c| matches!(&c.verdict,
        Verdict::NotApplicable { reason } if reason.contains("custom channel `workers`"))));

    // The HTTP action ran: its guessed arguments (`{"service": "sample"}`) passed the static
    // checks and the checks that apply to an observe action without a credential passed.
    let http = report.action("service_status").expect("http action");
    for check in [
        Check::Arguments,
        Check::UnknownField,
        Check::OutOfScope,
        Check::SensitiveData,
        Check::DroppedCall,
    ] {
        assert_eq!(
            http.check(check).map(|c| &c.verdict),
            Some(&Verdict::Passed),
            "{check}:\n{report}"
        );
    }
    assert!(matches!(
        http.check(Check::RevokedCredential).map(|c| &c.verdict),
        Some(Verdict::NotApplicable { .. })
    ));
    assert!(
        http.check(Check::Arguments)
            .expect("arguments")
            .observed
            .contains(r#"{"service":"sample"}"#),
        "{report}"
    );
    let text = report.to_string();
    assert!(
        text.contains(
            "ssh_service_status (ssh, observe)\n  n/a   arguments: not applicable to SSH"
        ),
        "{text}"
    );
    assert!(!text.contains("pass  arguments: not applicable"), "{text}");
    report.assert_passed();
}

/// Search the issues of one repository.
#[derive(Action, Deserialize, JsonSchema)]
#[action(
    name = "search_issues",
    effect = observe,
    method_override = "the search endpoint takes its query as a POST body and changes nothing"
)]
#[http(post = "/v1/search/issues", result = Service)]
#[serde(deny_unknown_fields)]
struct SearchIssues {
    /// The query.
    q: String,
}

#[tokio::test]
async fn a_method_override_is_a_finding_to_review_and_not_a_failure() {
    let catalog = Catalog::builder()
        .action::<SearchIssues>()
        .action::<ServiceStatus>()
        .build()
        .expect("catalog");
    let report = sallyport_testkit::bench(&catalog).run().await;
    println!("{report}");

    let search = report.action("search_issues").expect("the search action");
    let [finding] = search.findings.as_slice() else {
        panic!("one finding:\n{report}");
    };
    assert_eq!(finding.kind, sallyport_testkit::FindingKind::MethodOverride);
    assert_eq!(
        finding.observed,
        "`search_issues` is declared `observe` on POST, a method meant to change state, with \
         the override: the search endpoint takes its query as a POST body and changes nothing"
    );
    assert_eq!(
        finding.review,
        "confirm against the upstream's documentation that this POST changes nothing; if it \
         does, declare the effect it has and remove `method_override`"
    );
    let status = report.action("service_status").expect("the GET action");
    assert!(status.findings.is_empty());
    assert_eq!(report.findings().count(), 1);
    let text = report.to_string();
    assert!(
        text.contains("\n1 findings to review (not failures)\n"),
        "{text}"
    );
    assert!(
        text.contains("  note  method_override: `search_issues`"),
        "{text}"
    );
    // A finding is not a failure: the checks of both actions ran and passed.
    report.assert_passed();
}
