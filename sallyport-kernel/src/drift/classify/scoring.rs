//! The scoring table: one rule per kind of definition change, and the verdict the matched
//! rules combine into (status, severity, risk score, disposition, recommended action).

use std::collections::BTreeSet;

use sallyport_vocab::drift::{
    CoreDisposition, DefinitionChange, DriftStatus, ReasonCode, RecommendedAction, Severity,
};

/// One row of the scoring table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScoringRule {
    /// A stable name for the rule (`schema_widened`).
    pub rule: &'static str,
    /// The reason code it reports.
    pub reason: ReasonCode,
    /// The status it implies.
    pub status: DriftStatus,
    /// The severity it implies.
    pub severity: Severity,
    /// Its risk score (0–100).
    pub score: u8,
}

const fn rule(
    rule: &'static str,
    reason: ReasonCode,
    status: DriftStatus,
    severity: Severity,
    score: u8,
) -> ScoringRule {
    ScoringRule {
        rule,
        reason,
        status,
        severity,
        score,
    }
}

use DriftStatus::{Changed, Quarantined, ReviewRequired};
use ReasonCode as R;
use Severity::{Critical, High, Low, Medium};

pub(super) const DESCRIPTION: ScoringRule = rule(
    "description_changed",
    R::DescriptionChanged,
    Changed,
    Low,
    10,
);
pub(super) const SCHEMA_NARROWED: ScoringRule =
    rule("schema_narrowed", R::SchemaChanged, Changed, Low, 20);
pub(super) const SCHEMA_WIDENED: ScoringRule = rule(
    "schema_widened",
    R::SchemaChanged,
    ReviewRequired,
    Medium,
    45,
);
pub(super) const REQUIRED: ScoringRule = rule(
    "required_parameters_changed",
    R::RequiredParametersChanged,
    ReviewRequired,
    Medium,
    50,
);
pub(super) const SCHEMA_UNREADABLE: ScoringRule = rule(
    "schema_unreadable",
    R::MetadataConfidenceLow,
    ReviewRequired,
    Medium,
    40,
);
pub(crate) const UNKNOWN_FIELD: ScoringRule = rule(
    "unknown_definition_field",
    R::MetadataConfidenceLow,
    ReviewRequired,
    Medium,
    40,
);
pub(super) const CRATE_VERSION: ScoringRule = rule(
    "crate_version_changed",
    R::ProvenanceChanged,
    Changed,
    Low,
    5,
);
pub(super) const UPSTREAM_SPEC: ScoringRule = rule(
    "upstream_spec_changed",
    R::ProvenanceChanged,
    ReviewRequired,
    Medium,
    40,
);
pub(super) const CONSENT_STRONGER: ScoringRule = rule(
    "consent_strengthened",
    R::ConsentStrengthened,
    Changed,
    Low,
    5,
);
pub(super) const CONSENT_WEAKER: ScoringRule = rule(
    "consent_weakened",
    R::ConsentWeakened,
    Quarantined,
    High,
    85,
);
pub(super) const RETRY_TIGHTER: ScoringRule =
    rule("retry_tightened", R::RetryChanged, Changed, Low, 10);
pub(super) const RETRY_LOOSER: ScoringRule = rule(
    "retry_loosened",
    R::RetryChanged,
    ReviewRequired,
    Medium,
    45,
);
pub(super) const EFFECT_UP: ScoringRule = rule(
    "effect_escalation",
    R::EffectEscalation,
    Quarantined,
    High,
    85,
);
pub(super) const EFFECT_UP_IRREVERSIBLE: ScoringRule = rule(
    "effect_escalation_irreversible",
    R::EffectEscalation,
    Quarantined,
    Critical,
    95,
);
pub(super) const EFFECT_DOWN: ScoringRule = rule(
    "effect_deescalation",
    R::EffectDeescalation,
    ReviewRequired,
    Medium,
    50,
);
pub(super) const EXTERNAL: ScoringRule = rule(
    "externality_to_external",
    R::ExternalityChanged,
    Quarantined,
    High,
    80,
);
pub(super) const INTERNAL: ScoringRule = rule(
    "externality_to_internal",
    R::ExternalityChanged,
    ReviewRequired,
    Medium,
    40,
);
pub(super) const DATA_ADDED: ScoringRule = rule(
    "data_classes_added",
    R::DataClassesAdded,
    Quarantined,
    High,
    75,
);
pub(super) const DATA_REMOVED: ScoringRule = rule(
    "data_classes_removed",
    R::DataClassesRemoved,
    Changed,
    Low,
    10,
);
pub(super) const SCOPE_ADDED: ScoringRule =
    rule("scope_tag_added", R::ScopeChanged, Changed, Low, 15);
pub(super) const SCOPE_REMOVED: ScoringRule =
    rule("scope_tag_removed", R::ScopeChanged, Quarantined, High, 85);
pub(super) const CREDENTIAL: ScoringRule = rule(
    "credential_changed",
    R::CredentialChanged,
    Quarantined,
    High,
    80,
);
pub(super) const TARGET: ScoringRule =
    rule("target_changed", R::TargetChanged, Quarantined, High, 80);
pub(super) const RESULT_MAPPING: ScoringRule = rule(
    "result_mapping_changed",
    R::ResultMappingChanged,
    ReviewRequired,
    Medium,
    40,
);
pub(super) const RECONCILE: ScoringRule =
    rule("reconcile_changed", R::ReconcileChanged, Changed, Low, 15);
pub(crate) const TOOL_ADDED: ScoringRule =
    rule("tool_added", R::ToolAdded, ReviewRequired, Medium, 50);
pub(crate) const TOOL_REMOVED: ScoringRule = rule("tool_removed", R::ToolRemoved, Changed, Low, 20);
pub(crate) const CANONICALIZATION: ScoringRule = rule(
    "canonicalization_error",
    R::CanonicalizationError,
    ReviewRequired,
    High,
    70,
);
pub(crate) const PERMISSION_EXPANSION: ScoringRule = rule(
    "effective_permission_expansion",
    R::EffectivePermissionExpansion,
    Quarantined,
    High,
    90,
);

/// The scoring table: it turns meanings into a status, a severity and a risk score.
///
/// Every change matches one or more rules of [`SCORING_TABLE`]. The decision takes the worst
/// status and the worst severity of the matched rules; the risk score is the highest matched
/// score plus 5 for every further distinct rule, capped at 100. The disposition follows the
/// status (`clean`/`changed` → `allowed`, `review_required` → `deferred`, `quarantined` →
/// `denied`, terminal), except that a definition that cannot be canonicalized is `error`.
///
/// | rule | reason | status | severity | score |
/// |---|---|---|---|---|
/// | description or summary (or a schema annotation) changed | `description_changed` | changed | low | 10 |
/// | input schema narrowed (fewer fields, tighter bounds, fewer enum values) | `schema_changed` | changed | low | 20 |
/// | input schema widened (new fields, looser bounds, more types) | `schema_changed` | review_required | medium | 45 |
/// | required parameters added or removed | `required_parameters_changed` | review_required | medium | 50 |
/// | a schema change the classifier cannot read (`$ref`, `anyOf` arity, `default`, unknown keyword) | `metadata_confidence_low` | review_required | medium | 40 |
/// | a definition field this build does not know changed | `metadata_confidence_low` | review_required | medium | 40 |
/// | crate version changed | `provenance_changed` | changed | low | 5 |
/// | upstream spec hash changed | `provenance_changed` | review_required | medium | 40 |
/// | consent rule stricter | `consent_strengthened` | changed | low | 5 |
/// | consent rule weaker | `consent_weakened` | quarantined | high | 85 |
/// | retry rule now `never` | `retry_changed` | changed | low | 10 |
/// | retry rule looser (`never` → `idempotency_key` → `safe`) | `retry_changed` | review_required | medium | 45 |
/// | effect class up | `effect_escalation` | quarantined | high | 85 |
/// | effect class up to `irreversible_or_broad` | `effect_escalation` | quarantined | critical | 95 |
/// | effect class down | `effect_deescalation` | review_required | medium | 50 |
/// | externality internal → external | `externality_changed` | quarantined | high | 80 |
/// | externality external → internal | `externality_changed` | review_required | medium | 40 |
/// | data classes added | `data_classes_added` | quarantined | high | 75 |
/// | data classes removed | `data_classes_removed` | changed | low | 10 |
/// | scope tag added | `scope_changed` | changed | low | 15 |
/// | scope tag removed or its kind changed | `scope_changed` | quarantined | high | 85 |
/// | credential binding added, removed or renamed | `credential_changed` | quarantined | high | 80 |
/// | channel target changed (channel, method, path, query, headers, body fields, host, argv), or the audit-note field added, moved or dropped | `target_changed` | quarantined | high | 80 |
/// | result mapping changed (status and exit mappings, result shape, body rules, limits) | `result_mapping_changed` | review_required | medium | 40 |
/// | reconcile action changed | `reconcile_changed` | changed | low | 15 |
/// | action not in the baseline | `tool_added` | review_required | medium | 50 |
/// | baseline action no longer in the catalog | `tool_removed` | changed | low | 20 |
/// | definition cannot be canonicalized, or a lockfile entry does not match its hash | `canonicalization_error` | review_required (disposition `error`) | high | 70 |
/// | a permission probe expected to be denied was accepted | `effective_permission_expansion` | quarantined | high | 90 |
pub const SCORING_TABLE: &[ScoringRule] = &[
    DESCRIPTION,
    SCHEMA_NARROWED,
    SCHEMA_WIDENED,
    REQUIRED,
    SCHEMA_UNREADABLE,
    UNKNOWN_FIELD,
    CRATE_VERSION,
    UPSTREAM_SPEC,
    CONSENT_STRONGER,
    CONSENT_WEAKER,
    RETRY_TIGHTER,
    RETRY_LOOSER,
    EFFECT_UP,
    EFFECT_UP_IRREVERSIBLE,
    EFFECT_DOWN,
    EXTERNAL,
    INTERNAL,
    DATA_ADDED,
    DATA_REMOVED,
    SCOPE_ADDED,
    SCOPE_REMOVED,
    CREDENTIAL,
    TARGET,
    RESULT_MAPPING,
    RECONCILE,
    TOOL_ADDED,
    TOOL_REMOVED,
    CANONICALIZATION,
    PERMISSION_EXPANSION,
];

/// The verdict part of a decision, before ids and times are attached.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Verdict {
    pub(crate) drift_status: DriftStatus,
    pub(crate) core_disposition: CoreDisposition,
    pub(crate) terminal: bool,
    pub(crate) severity: Severity,
    pub(crate) risk_score: u8,
    pub(crate) reasons: Vec<ReasonCode>,
    pub(crate) changes: Vec<DefinitionChange>,
    pub(crate) recommended_action: RecommendedAction,
}

impl Verdict {
    fn clean() -> Self {
        Self {
            drift_status: DriftStatus::Clean,
            core_disposition: CoreDisposition::Allowed,
            terminal: false,
            severity: Severity::Safe,
            risk_score: 0,
            reasons: Vec::new(),
            changes: Vec::new(),
            recommended_action: RecommendedAction::Allow,
        }
    }

    /// Applies the scoring table to the matched rules.
    pub(crate) fn from_rules(rules: &[ScoringRule], changes: Vec<DefinitionChange>) -> Self {
        let mut distinct: Vec<ScoringRule> = Vec::new();
        for r in rules {
            if !distinct.iter().any(|d| d.rule == r.rule) {
                distinct.push(*r);
            }
        }
        let Some(worst_score) = distinct.iter().map(|r| r.score).max() else {
            return Self::clean();
        };
        let extra = u8::try_from(distinct.len().saturating_sub(1).min(20)).unwrap_or(20);
        let risk_score = worst_score.saturating_add(extra * 5).min(100);
        let drift_status = distinct
            .iter()
            .map(|r| r.status)
            .max()
            .unwrap_or(DriftStatus::Clean);
        let severity = distinct
            .iter()
            .map(|r| r.severity)
            .max()
            .unwrap_or(Severity::Safe);
        let reasons: Vec<ReasonCode> = distinct
            .iter()
            .map(|r| r.reason)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let error = reasons.contains(&ReasonCode::CanonicalizationError)
            && drift_status != DriftStatus::Quarantined;
        let core_disposition = if error {
            CoreDisposition::Error
        } else {
            match drift_status {
                DriftStatus::Clean | DriftStatus::Changed => CoreDisposition::Allowed,
                DriftStatus::ReviewRequired => CoreDisposition::Deferred,
                DriftStatus::Quarantined => CoreDisposition::Denied,
            }
        };
        let recommended_action = match drift_status {
            DriftStatus::Quarantined => RecommendedAction::KeepQuarantined,
            _ if error => RecommendedAction::RequireReview,
            _ if reasons == [ReasonCode::ToolAdded] || reasons == [ReasonCode::ToolRemoved] => {
                RecommendedAction::ApproveNewBaseline
            }
            DriftStatus::ReviewRequired => RecommendedAction::RequireReview,
            DriftStatus::Changed => RecommendedAction::Monitor,
            DriftStatus::Clean => RecommendedAction::Allow,
        };
        Self {
            drift_status,
            core_disposition,
            terminal: drift_status == DriftStatus::Quarantined,
            severity,
            risk_score,
            reasons,
            changes,
            recommended_action,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn risk_score_is_the_worst_rule_plus_five_per_further_rule() {
        let v = Verdict::from_rules(&[DESCRIPTION, SCHEMA_WIDENED, DESCRIPTION], Vec::new());
        assert_eq!(v.risk_score, 50);
        assert_eq!(v.drift_status, DriftStatus::ReviewRequired);
        assert_eq!(
            v.reasons,
            [ReasonCode::DescriptionChanged, ReasonCode::SchemaChanged]
        );
        let all = Verdict::from_rules(SCORING_TABLE, Vec::new());
        assert_eq!(all.risk_score, 100);
        assert_eq!(all.core_disposition, CoreDisposition::Denied);
        assert!(all.terminal);
    }
}
