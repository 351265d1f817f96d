//! A finding, not a check: an `observe` action whose method is meant to change state, which
//! compiles only with its author's reviewed reason (`method_override`). The bench cannot tell
//! whether the upstream really only reads; it shows the reason for a human to confirm.

use sallyport_core::ActionSpec;
use sallyport_core::target::Target;

use crate::report::{Finding, FindingKind};

/// The method override of `spec`, as a finding to review; `None` when it has none.
pub(crate) fn reviewed(spec: &ActionSpec) -> Option<Finding> {
    let reason = spec.method_override.as_deref()?;
    let method = match &spec.target {
        Target::Http(http) => http.method.as_str(),
        _ => "its method",
    };
    Some(Finding {
        kind: FindingKind::MethodOverride,
        observed: format!(
            "`{}` is declared `{}` on {method}, a method meant to change state, with the \
             override: {reason}",
            spec.name, spec.effect
        ),
        review: format!(
            "confirm against the upstream's documentation that this {method} changes nothing; \
             if it does, declare the effect it has and remove `method_override`"
        ),
    })
}

#[cfg(test)]
mod tests {
    use sallyport_core::target::{HttpMethod, HttpTarget};
    use sallyport_core::{ActionSpec, EffectClass};

    use super::*;

    #[test]
    fn an_override_is_a_finding_with_its_reason_and_no_override_is_none() {
        let search = ActionSpec::new("search_issues", EffectClass::Observe)
            .with_target(Target::Http(HttpTarget::new(HttpMethod::Post, "/search")))
            .with_method_override("the query is a POST body");
        let finding = reviewed(&search).expect("a finding");
        assert_eq!(finding.kind, FindingKind::MethodOverride);
        assert_eq!(
            finding.observed,
            "`search_issues` is declared `observe` on POST, a method meant to change state, \
             with the override: the query is a POST body"
        );
        assert_eq!(
            finding.review,
            "confirm against the upstream's documentation that this POST changes nothing; if \
             it does, declare the effect it has and remove `method_override`"
        );
        let read = ActionSpec::new("get_issue", EffectClass::Observe)
            .with_target(Target::Http(HttpTarget::new(HttpMethod::Get, "/issue")));
        assert_eq!(reviewed(&read), None);
    }
}
