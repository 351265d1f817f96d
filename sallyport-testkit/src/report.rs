//! The bench's report: one line per action and check, with what was observed, and for a
//! failed check what the author should change.

use std::fmt;

sallyport_vocab::string_enum! {
    /// One check of the bench; its name is what the report prints, and `ALL` is the order
    /// the bench runs them in.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    #[non_exhaustive]
    pub enum Check {
        /// The bench has valid arguments for the action (the author's example, or a guess the
        /// executor's static checks accept).
        Arguments => "arguments",
        /// An unknown field is refused and nothing is sent.
        UnknownField => "unknown_field_refused",
        /// An object outside the session's scope is refused and nothing is sent.
        OutOfScope => "out_of_scope_refused",
        /// Consent denied sends nothing.
        ConsentDenied => "consent_denied_sends_nothing",
        /// A timeout after the server committed is `unknown`, names the reconcile action, and the
        /// server saw one request (or the same idempotency key on each resend).
        TimeoutAfterCommit => "timeout_after_commit_is_unknown",
        /// The echoed credential, a stack trace and an internal URL the upstream returns never
        /// reach the result, the audit record or the logs.
        SensitiveData => "sensitive_data_never_leaves",
        /// A credential the upstream rejects is used for one request, then refused locally.
        RevokedCredential => "revoked_credential_stops",
        /// A call whose future is dropped is recorded as never sent, or as unknown once sent.
        DroppedCall => "dropped_call_is_recorded",
        /// Consent is asked after the static checks and before the request.
        ConsentOrder => "consent_after_static_checks_before_send",
    }
}

/// How a check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// It ran and held.
    Passed,
    /// It ran and did not hold; `fix` says what the author should change.
    Failed {
        /// What to change.
        fix: String,
    },
    /// It does not apply to this action (and was not run); never counted as passed.
    NotApplicable {
        /// Why.
        reason: String,
    },
}

/// One check of one action.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckReport {
    /// The check.
    pub check: Check,
    /// How it ended.
    pub verdict: Verdict,
    /// What the bench observed (statuses, codes, request counts, audit phases).
    pub observed: String,
}

impl CheckReport {
    pub(crate) fn passed(check: Check, observed: impl Into<String>) -> Self {
        Self {
            check,
            verdict: Verdict::Passed,
            observed: observed.into(),
        }
    }

    pub(crate) fn failed(
        check: Check,
        observed: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            check,
            verdict: Verdict::Failed { fix: fix.into() },
            observed: observed.into(),
        }
    }

    /// Passed if `held`, else failed with `fix`; `lines` (what was observed) joined by `; `.
    pub(crate) fn judged(check: Check, held: bool, lines: &[String], fix: &str) -> Self {
        let observed = lines.join("; ");
        if held {
            Self::passed(check, observed)
        } else {
            Self::failed(check, observed, fix)
        }
    }

    pub(crate) fn not_applicable(check: Check, reason: impl Into<String>) -> Self {
        Self {
            check,
            verdict: Verdict::NotApplicable {
                reason: reason.into(),
            },
            observed: String::new(),
        }
    }

    /// Whether the check failed.
    pub fn is_failed(&self) -> bool {
        matches!(self.verdict, Verdict::Failed { .. })
    }
}

sallyport_vocab::string_enum! {
    /// What a finding is about.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    #[non_exhaustive]
    pub enum FindingKind {
        /// An `observe` action on a method meant to change state, compiled with its author's
        /// reviewed `method_override` reason.
        MethodOverride => "method_override",
    }
}

/// Something a human should review in an action's definition: never a failure (the bench
/// still passes), always printed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// What it is about.
    pub kind: FindingKind,
    /// What the bench read in the definition.
    pub observed: String,
    /// What the reviewer should confirm.
    pub review: String,
}

/// Every check of one action.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActionReport {
    /// The action's name.
    pub action: String,
    /// Its channel (`http`, `ssh`, or a custom name).
    pub channel: String,
    /// Its effect class.
    pub effect: String,
    /// The checks, in the order they ran.
    pub checks: Vec<CheckReport>,
    /// What a human should review; never failures.
    pub findings: Vec<Finding>,
}

impl ActionReport {
    /// The report of `check`, if the bench made one.
    pub fn check(&self, check: Check) -> Option<&CheckReport> {
        self.checks.iter().find(|c| c.check == check)
    }
}

/// The bench's report over a catalog. [`fmt::Display`] renders it for a human.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// One report per action, in catalog order.
    pub actions: Vec<ActionReport>,
    /// Whether the bench's journal verified intact after every check (`None` if it could
    /// not be read).
    pub journal_intact: Option<bool>,
}

impl Report {
    /// The report of action `name`.
    pub fn action(&self, name: &str) -> Option<&ActionReport> {
        self.actions.iter().find(|a| a.action == name)
    }

    /// Every failed check, with its action.
    pub fn failures(&self) -> impl Iterator<Item = (&ActionReport, &CheckReport)> {
        self.actions
            .iter()
            .flat_map(|a| a.checks.iter().map(move |c| (a, c)))
            .filter(|(_, c)| c.is_failed())
    }

    /// Every finding, with its action.
    pub fn findings(&self) -> impl Iterator<Item = (&ActionReport, &Finding)> {
        self.actions
            .iter()
            .flat_map(|a| a.findings.iter().map(move |f| (a, f)))
    }

    /// Whether every check that ran held and the journal verified (findings do not count).
    pub fn passed(&self) -> bool {
        self.failures().next().is_none() && self.journal_intact == Some(true)
    }

    /// Panics with the whole report unless [`Report::passed`].
    ///
    /// # Panics
    ///
    /// When a check failed or the journal did not verify; the message names each failed
    /// action and check and what to change.
    #[track_caller]
    pub fn assert_passed(&self) {
        assert!(self.passed(), "the sallyport bench failed:\n{self}");
    }

    /// The report in one line, the first line of its [`Display`](fmt::Display): `sallyport
    /// bench: 5 actions; 41 checks passed, 0 failed, 9 not applicable; journal verified
    /// intact`. [`Bench::run`](crate::Bench::run) prints it when it ends.
    pub fn summary(&self) -> String {
        format!(
            "sallyport bench: {} actions; {} checks passed, {} failed, {} not applicable; journal {}",
            self.actions.len(),
            self.count(|v| *v == Verdict::Passed),
            self.count(|v| matches!(v, Verdict::Failed { .. })),
            self.count(|v| matches!(v, Verdict::NotApplicable { .. })),
            match self.journal_intact {
                Some(true) => "verified intact",
                Some(false) => "BROKEN",
                None => "unreadable",
            }
        )
    }

    fn count(&self, f: impl Fn(&Verdict) -> bool) -> usize {
        self.actions
            .iter()
            .flat_map(|a| &a.checks)
            .filter(|c| f(&c.verdict))
            .count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        let findings = self.findings().count();
        if findings > 0 {
            writeln!(f, "{findings} findings to review (not failures)")?;
        }
        for action in &self.actions {
            writeln!(
                f,
                "{} ({}, {})",
                action.action, action.channel, action.effect
            )?;
            for check in &action.checks {
                match &check.verdict {
                    Verdict::Passed => writeln!(f, "  pass  {}: {}", check.check, check.observed)?,
                    Verdict::Failed { fix } => {
                        writeln!(
                            f,
                            "  FAIL  {} / {}: {}",
                            action.action, check.check, check.observed
                        )?;
                        writeln!(f, "        fix: {fix}")?;
                    }
                    Verdict::NotApplicable { reason } => {
                        writeln!(f, "  n/a   {}: {reason}", check.check)?;
                    }
                }
            }
            for finding in &action.findings {
                writeln!(f, "  note  {}: {}", finding.kind, finding.observed)?;
                writeln!(f, "        review: {}", finding.review)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_check_names_the_action_the_check_and_the_fix() {
        let report = Report {
            actions: vec![ActionReport {
                action: "refund".into(),
                channel: "http".into(),
                effect: "external_commitment".into(),
                checks: vec![
                    CheckReport::passed(Check::UnknownField, "rejected/invalid_arguments"),
                    CheckReport::failed(
                        Check::TimeoutAfterCommit,
                        "unknown, no next",
                        "declare a reconcile action",
                    ),
                    CheckReport::not_applicable(Check::ConsentDenied, "consent rule `none`"),
                ],
                findings: Vec::new(),
            }],
            journal_intact: Some(true),
        };
        assert!(!report.passed());
        let text = report.to_string();
        assert!(text.starts_with(
            "sallyport bench: 1 actions; 1 checks passed, 1 failed, 1 not applicable; journal verified intact\n"
        ));
        assert_eq!(
            report.summary(),
            "sallyport bench: 1 actions; 1 checks passed, 1 failed, 1 not applicable; journal verified intact"
        );
        assert!(text.contains(
            "  FAIL  refund / timeout_after_commit_is_unknown: unknown, no next\n        fix: declare a reconcile action\n"
        ));
        assert!(text.contains("  n/a   consent_denied_sends_nothing: consent rule `none`\n"));
    }

    #[test]
    fn a_finding_is_printed_for_review_and_is_no_failure() {
        let report = Report {
            actions: vec![ActionReport {
                action: "search".into(),
                channel: "http".into(),
                effect: "observe".into(),
                checks: vec![CheckReport::passed(Check::UnknownField, "rejected")],
                findings: vec![Finding {
                    kind: FindingKind::MethodOverride,
                    observed: "POST declared observe: a search".into(),
                    review: "confirm it reads".into(),
                }],
            }],
            journal_intact: Some(true),
        };
        assert!(report.passed());
        assert_eq!(report.failures().count(), 0);
        assert_eq!(report.findings().count(), 1);
        let text = report.to_string();
        assert!(
            text.starts_with(
                "sallyport bench: 1 actions; 1 checks passed, 0 failed, 0 not applicable; \
                 journal verified intact\n1 findings to review (not failures)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  note  method_override: POST declared observe: a search\n        review: \
                 confirm it reads\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_report_without_a_verified_journal_does_not_pass() {
        let report = Report {
            actions: Vec::new(),
            journal_intact: None,
        };
        assert!(!report.passed());
    }
}

#[cfg(test)]
mod string_enum_tests {
    use super::{Check, FindingKind};

    sallyport_vocab::__string_enum_tests! {
        check: Check = [
            "arguments",
            "unknown_field_refused",
            "out_of_scope_refused",
            "consent_denied_sends_nothing",
            "timeout_after_commit_is_unknown",
            "sensitive_data_never_leaves",
            "revoked_credential_stops",
            "dropped_call_is_recorded",
            "consent_after_static_checks_before_send",
        ];
        finding_kind: FindingKind = ["method_override"];
    }
}
