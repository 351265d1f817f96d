//! Classifying a definition change: which fields changed, what each change means, and the
//! scoring table that turns meanings into a status, a severity and a risk score.
//!
//! The rules and how they combine are documented on [`SCORING_TABLE`].

use std::collections::BTreeSet;

use serde_json::Value;

use super::decision::{
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

pub(crate) const DESCRIPTION: ScoringRule = rule(
    "description_changed",
    R::DescriptionChanged,
    Changed,
    Low,
    10,
);
pub(crate) const SCHEMA_NARROWED: ScoringRule =
    rule("schema_narrowed", R::SchemaChanged, Changed, Low, 20);
pub(crate) const SCHEMA_WIDENED: ScoringRule = rule(
    "schema_widened",
    R::SchemaChanged,
    ReviewRequired,
    Medium,
    45,
);
pub(crate) const REQUIRED: ScoringRule = rule(
    "required_parameters_changed",
    R::RequiredParametersChanged,
    ReviewRequired,
    Medium,
    50,
);
pub(crate) const SCHEMA_UNREADABLE: ScoringRule = rule(
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
pub(crate) const CRATE_VERSION: ScoringRule = rule(
    "crate_version_changed",
    R::ProvenanceChanged,
    Changed,
    Low,
    5,
);
pub(crate) const UPSTREAM_SPEC: ScoringRule = rule(
    "upstream_spec_changed",
    R::ProvenanceChanged,
    ReviewRequired,
    Medium,
    40,
);
pub(crate) const CONSENT_STRONGER: ScoringRule = rule(
    "consent_strengthened",
    R::ConsentStrengthened,
    Changed,
    Low,
    5,
);
pub(crate) const CONSENT_WEAKER: ScoringRule = rule(
    "consent_weakened",
    R::ConsentWeakened,
    Quarantined,
    High,
    85,
);
pub(crate) const RETRY_TIGHTER: ScoringRule =
    rule("retry_tightened", R::RetryChanged, Changed, Low, 10);
pub(crate) const RETRY_LOOSER: ScoringRule = rule(
    "retry_loosened",
    R::RetryChanged,
    ReviewRequired,
    Medium,
    45,
);
pub(crate) const EFFECT_UP: ScoringRule = rule(
    "effect_escalation",
    R::EffectEscalation,
    Quarantined,
    High,
    85,
);
pub(crate) const EFFECT_UP_IRREVERSIBLE: ScoringRule = rule(
    "effect_escalation_irreversible",
    R::EffectEscalation,
    Quarantined,
    Critical,
    95,
);
pub(crate) const EFFECT_DOWN: ScoringRule = rule(
    "effect_deescalation",
    R::EffectDeescalation,
    ReviewRequired,
    Medium,
    50,
);
pub(crate) const EXTERNAL: ScoringRule = rule(
    "externality_to_external",
    R::ExternalityChanged,
    Quarantined,
    High,
    80,
);
pub(crate) const INTERNAL: ScoringRule = rule(
    "externality_to_internal",
    R::ExternalityChanged,
    ReviewRequired,
    Medium,
    40,
);
pub(crate) const DATA_ADDED: ScoringRule = rule(
    "data_classes_added",
    R::DataClassesAdded,
    Quarantined,
    High,
    75,
);
pub(crate) const DATA_REMOVED: ScoringRule = rule(
    "data_classes_removed",
    R::DataClassesRemoved,
    Changed,
    Low,
    10,
);
pub(crate) const SCOPE_ADDED: ScoringRule =
    rule("scope_tag_added", R::ScopeChanged, Changed, Low, 15);
pub(crate) const SCOPE_REMOVED: ScoringRule =
    rule("scope_tag_removed", R::ScopeChanged, Quarantined, High, 85);
pub(crate) const CREDENTIAL: ScoringRule = rule(
    "credential_changed",
    R::CredentialChanged,
    Quarantined,
    High,
    80,
);
pub(crate) const TARGET: ScoringRule =
    rule("target_changed", R::TargetChanged, Quarantined, High, 80);
pub(crate) const RESULT_MAPPING: ScoringRule = rule(
    "result_mapping_changed",
    R::ResultMappingChanged,
    ReviewRequired,
    Medium,
    40,
);
pub(crate) const RECONCILE: ScoringRule =
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

/// scoring table that turns meanings into a status, a severity and a risk score.
///
/// The scoring table.
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
    pub(crate) fn clean() -> Self {
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

/// Compares an approved definition with a live one (both canonical-definition JSON objects,
/// as [`crate::catalog::definition_of`] builds them) and returns the changes and the scoring
/// rules they match. Equal definitions match nothing.
pub fn compare_definitions(
    before: &Value,
    after: &Value,
) -> (Vec<DefinitionChange>, Vec<ScoringRule>) {
    let mut changes = Vec::new();
    diff(before, after, &mut String::new(), &mut changes);
    let mut rules = Vec::new();
    let empty = serde_json::Map::new();
    let b = before.as_object().unwrap_or(&empty);
    let a = after.as_object().unwrap_or(&empty);
    let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    for key in keys {
        let (bv, av) = (
            b.get(key).unwrap_or(&Value::Null),
            a.get(key).unwrap_or(&Value::Null),
        );
        if bv == av {
            continue;
        }
        match key.as_str() {
            "summary" | "description" => rules.push(DESCRIPTION),
            "input_schema" => classify_schema(bv, av, &mut rules),
            "effect" => {
                let (x, y) = (effect_rank(bv), effect_rank(av));
                match (x, y) {
                    (Some(x), Some(y)) if y > x && y == 3 => rules.push(EFFECT_UP_IRREVERSIBLE),
                    (Some(x), Some(y)) if y > x => rules.push(EFFECT_UP),
                    (Some(x), Some(y)) if y < x => rules.push(EFFECT_DOWN),
                    _ => rules.push(UNKNOWN_FIELD),
                }
            }
            "consent" => match (consent_rank(bv), consent_rank(av)) {
                (Some(x), Some(y)) if y > x => rules.push(CONSENT_STRONGER),
                (Some(x), Some(y)) if y < x => rules.push(CONSENT_WEAKER),
                _ => rules.push(UNKNOWN_FIELD),
            },
            "retry" => match (retry_rank(bv), retry_rank(av)) {
                (Some(x), Some(y)) if y < x => rules.push(RETRY_TIGHTER),
                (Some(x), Some(y)) if y > x => rules.push(RETRY_LOOSER),
                _ => rules.push(UNKNOWN_FIELD),
            },
            "externality" => match av.as_str() {
                Some("external") => rules.push(EXTERNAL),
                Some("internal") => rules.push(INTERNAL),
                _ => rules.push(UNKNOWN_FIELD),
            },
            "data_classes" => {
                let (x, y) = (string_set(bv), string_set(av));
                if y.difference(&x).next().is_some() {
                    rules.push(DATA_ADDED);
                }
                if x.difference(&y).next().is_some() {
                    rules.push(DATA_REMOVED);
                }
                if x == y {
                    // Same classes in another order: nothing about the data changed, but the
                    // definition did; a reviewer should confirm.
                    rules.push(UNKNOWN_FIELD);
                }
            }
            "scope_tags" => {
                let (x, y) = (value_set(bv), value_set(av));
                if x.difference(&y).next().is_some() {
                    rules.push(SCOPE_REMOVED);
                } else if y.difference(&x).next().is_some() {
                    rules.push(SCOPE_ADDED);
                } else {
                    rules.push(UNKNOWN_FIELD);
                }
            }
            "credential" => rules.push(CREDENTIAL),
            // Which field is the audit note decides which field the channel keeps out of the
            // request, like a template's `omit`: a change of what is sent.
            "audit_note" => rules.push(TARGET),
            "reconcile" => rules.push(RECONCILE),
            "target" => classify_target(bv, av, &mut rules),
            "provenance" => {
                if bv.get("crate_version") != av.get("crate_version") {
                    rules.push(CRATE_VERSION);
                }
                if bv.get("upstream_spec_hash") != av.get("upstream_spec_hash") {
                    rules.push(UPSTREAM_SPEC);
                }
            }
            _ => rules.push(UNKNOWN_FIELD),
        }
    }
    (changes, rules)
}

/// Fields of a channel target that say where the call goes and what it carries; the others
/// map the answer.
const TARGET_WHERE: &[&str] = &[
    "channel",
    "method",
    "path",
    "query",
    "headers",
    "body",
    "omit",
    "custom_request",
    "host",
    "argv",
    "name",
    "definition",
];

fn classify_target(before: &Value, after: &Value, rules: &mut Vec<ScoringRule>) {
    let (Some(b), Some(a)) = (before.as_object(), after.as_object()) else {
        rules.push(TARGET);
        return;
    };
    let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    for key in keys {
        if b.get(key) == a.get(key) {
            continue;
        }
        if TARGET_WHERE.contains(&key.as_str()) {
            rules.push(TARGET);
        } else {
            rules.push(RESULT_MAPPING);
        }
    }
}

fn effect_rank(v: &Value) -> Option<u8> {
    Some(match v.as_str()? {
        "observe" => 0,
        "reversible_change" => 1,
        "external_commitment" => 2,
        "irreversible_or_broad" => 3,
        _ => return None,
    })
}

fn consent_rank(v: &Value) -> Option<u8> {
    Some(match v.as_str()? {
        "none" => 0,
        "session" => 1,
        "per_call" => 2,
        _ => return None,
    })
}

/// Looseness: how freely the executor may resend.
fn retry_rank(v: &Value) -> Option<u8> {
    Some(match v.as_str()? {
        "never" => 0,
        "idempotency_key" => 1,
        "safe" => 2,
        _ => return None,
    })
}

fn string_set(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn value_set(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .map(|items| items.iter().map(super::canonical_json).collect())
        .unwrap_or_default()
}

/// Leaf-level differences, as JSON pointers with before/after (`null` when absent).
pub(crate) fn diff(
    before: &Value,
    after: &Value,
    path: &mut String,
    out: &mut Vec<DefinitionChange>,
) {
    if before == after {
        return;
    }
    if let (Value::Object(b), Value::Object(a)) = (before, after) {
        let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
        for key in keys {
            let len = path.len();
            path.push('/');
            path.push_str(&key.replace('~', "~0").replace('/', "~1"));
            diff(
                b.get(key).unwrap_or(&Value::Null),
                a.get(key).unwrap_or(&Value::Null),
                path,
                out,
            );
            path.truncate(len);
        }
        return;
    }
    out.push(DefinitionChange {
        field: path.clone(),
        before: before.clone(),
        after: after.clone(),
    });
}

/// Which way a schema moved.
#[derive(Debug, Default)]
struct SchemaFlags {
    narrowed: bool,
    widened: bool,
    unreadable: bool,
    required: bool,
    annotation: bool,
}

fn classify_schema(before: &Value, after: &Value, rules: &mut Vec<ScoringRule>) {
    let mut flags = SchemaFlags::default();
    schema_cmp(before, after, &mut flags, 0);
    if flags.annotation {
        rules.push(DESCRIPTION);
    }
    if flags.narrowed {
        rules.push(SCHEMA_NARROWED);
    }
    if flags.widened {
        rules.push(SCHEMA_WIDENED);
    }
    if flags.required {
        rules.push(REQUIRED);
    }
    if flags.unreadable {
        rules.push(SCHEMA_UNREADABLE);
    }
}

const LOWER_BOUNDS: &[&str] = &[
    "minLength",
    "minimum",
    "exclusiveMinimum",
    "minItems",
    "minProperties",
    "minContains",
];
const UPPER_BOUNDS: &[&str] = &[
    "maxLength",
    "maximum",
    "exclusiveMaximum",
    "maxItems",
    "maxProperties",
    "maxContains",
    "multipleOf",
];
const ANNOTATIONS: &[&str] = &[
    "description",
    "title",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
];
const ALL_TYPES: &[&str] = &[
    "array", "boolean", "integer", "null", "number", "object", "string",
];

fn schema_cmp(before: &Value, after: &Value, flags: &mut SchemaFlags, depth: usize) {
    if before == after {
        return;
    }
    if depth > 64 {
        flags.unreadable = true;
        return;
    }
    let (b, a) = match (before, after) {
        (Value::Object(b), Value::Object(a)) => (b, a),
        (Value::Bool(true), _) | (_, Value::Bool(false)) => {
            flags.narrowed = true;
            return;
        }
        (Value::Bool(false), _) | (_, Value::Bool(true)) => {
            flags.widened = true;
            return;
        }
        _ => {
            flags.unreadable = true;
            return;
        }
    };
    let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    for key in keys {
        let (bv, av) = (b.get(key), a.get(key));
        if bv == av {
            continue;
        }
        let k = key.as_str();
        match k {
            _ if ANNOTATIONS.contains(&k) => flags.annotation = true,
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                let empty = serde_json::Map::new();
                let bm = bv.and_then(Value::as_object).unwrap_or(&empty);
                let am = av.and_then(Value::as_object).unwrap_or(&empty);
                let names: BTreeSet<&String> = bm.keys().chain(am.keys()).collect();
                let defs = k == "$defs" || k == "definitions";
                for name in names {
                    match (bm.get(name), am.get(name)) {
                        (Some(x), Some(y)) => schema_cmp(x, y, flags, depth + 1),
                        // An unreferenced definition is inert; a new `$ref` shows elsewhere.
                        _ if defs => {}
                        (None, Some(_)) => flags.widened = true,
                        (Some(_), None) => flags.narrowed = true,
                        (None, None) => {}
                    }
                }
            }
            "required" => flags.required = true,
            "type" => {
                let (x, y) = (type_set(bv), type_set(av));
                set_direction(&x, &y, flags);
            }
            "enum" => match (bv, av) {
                (None, Some(_)) => flags.narrowed = true,
                (Some(_), None) => flags.widened = true,
                (Some(x), Some(y)) => {
                    let (x, y) = (value_set(x), value_set(y));
                    set_direction(&x, &y, flags);
                }
                (None, None) => {}
            },
            "const" | "pattern" | "format" | "contentMediaType" | "contentEncoding" => {
                match (bv, av) {
                    (None, Some(_)) => flags.narrowed = true,
                    (Some(_), None) => flags.widened = true,
                    _ => flags.unreadable = true,
                }
            }
            _ if LOWER_BOUNDS.contains(&k) || UPPER_BOUNDS.contains(&k) => {
                let lower = LOWER_BOUNDS.contains(&k);
                let (x, y) = (bv.and_then(Value::as_f64), av.and_then(Value::as_f64));
                let tighter = match (x, y) {
                    (None, Some(_)) => Some(true),
                    (Some(_), None) => Some(false),
                    (Some(x), Some(y)) if k == "multipleOf" => {
                        // A multiple of a multiple is tighter; anything else cannot be told.
                        if y > x && (y / x).fract() == 0.0 {
                            Some(true)
                        } else if x > y && (x / y).fract() == 0.0 {
                            Some(false)
                        } else {
                            None
                        }
                    }
                    (Some(x), Some(y)) => Some(if lower { y > x } else { y < x }),
                    (None, None) => None,
                };
                match tighter {
                    Some(true) => flags.narrowed = true,
                    Some(false) => flags.widened = true,
                    None => flags.unreadable = true,
                }
            }
            "uniqueItems" => {
                if av == Some(&Value::Bool(true)) {
                    flags.narrowed = true;
                } else {
                    flags.widened = true;
                }
            }
            "additionalProperties"
            | "unevaluatedProperties"
            | "items"
            | "additionalItems"
            | "contains"
            | "propertyNames" => {
                // Absent means "anything".
                let any = Value::Bool(true);
                schema_cmp(bv.unwrap_or(&any), av.unwrap_or(&any), flags, depth + 1);
            }
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                match (bv.and_then(Value::as_array), av.and_then(Value::as_array)) {
                    (Some(x), Some(y)) if x.len() == y.len() => {
                        for (p, q) in x.iter().zip(y) {
                            schema_cmp(p, q, flags, depth + 1);
                        }
                    }
                    _ => flags.unreadable = true,
                }
            }
            _ => flags.unreadable = true,
        }
    }
}

fn type_set(v: Option<&Value>) -> BTreeSet<String> {
    match v {
        None => ALL_TYPES.iter().map(|t| (*t).to_owned()).collect(),
        Some(Value::String(s)) => std::iter::once(s.clone()).collect(),
        Some(other) => string_set(other),
    }
}

fn set_direction(before: &BTreeSet<String>, after: &BTreeSet<String>, flags: &mut SchemaFlags) {
    let added = after.difference(before).next().is_some();
    let removed = before.difference(after).next().is_some();
    if added {
        flags.widened = true;
    }
    if removed {
        flags.narrowed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reasons(before: &Value, after: &Value) -> Vec<&'static str> {
        let (_, rules) = compare_definitions(before, after);
        let mut names: Vec<&str> = rules.iter().map(|r| r.rule).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    fn schema(v: &Value) -> Value {
        json!({ "input_schema": v })
    }

    #[test]
    fn schema_directions_are_read_per_keyword() {
        let base = json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10}},
            "required": ["a"], "additionalProperties": false});
        let cases = [
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5}},
                "required": ["a"], "additionalProperties": false}),
                vec!["schema_narrowed"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string"}},
                "required": ["a"], "additionalProperties": false}),
                vec!["schema_widened"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10}, "b": {}},
                "required": ["a"], "additionalProperties": false}),
                vec!["schema_widened"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10}},
                "required": ["a"], "additionalProperties": true}),
                vec!["schema_widened"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10}},
                "required": [], "additionalProperties": false}),
                vec!["required_parameters_changed"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": ["string", "null"], "maxLength": 10}},
                "required": ["a"], "additionalProperties": false}),
                vec!["schema_widened"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10, "description": "x"}},
                "required": ["a"], "additionalProperties": false}),
                vec!["description_changed"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}},
                "required": ["a"], "additionalProperties": false}),
                vec!["schema_unreadable", "schema_widened"],
            ),
        ];
        for (after, expected) in cases {
            assert_eq!(
                reasons(&schema(&base), &schema(&after)),
                expected,
                "{after}"
            );
        }
    }

    #[test]
    fn target_fields_split_into_where_and_mapping() {
        let before =
            json!({"target": {"channel": "http", "method": "GET", "path": "/a", "statuses": []}});
        let path =
            json!({"target": {"channel": "http", "method": "GET", "path": "/b", "statuses": []}});
        let mapping = json!({"target": {"channel": "http", "method": "GET", "path": "/a",
            "statuses": [{"code": 409, "status": "already_in_desired_state"}]}});
        assert_eq!(reasons(&before, &path), ["target_changed"]);
        assert_eq!(reasons(&before, &mapping), ["result_mapping_changed"]);
    }

    #[test]
    fn moving_adding_or_dropping_the_audit_note_is_a_target_change() {
        let none = json!({"name": "a"});
        let reason = json!({"name": "a", "audit_note": "reason"});
        let other = json!({"name": "a", "audit_note": "justification"});
        assert_eq!(reasons(&none, &reason), ["target_changed"]);
        assert_eq!(reasons(&reason, &other), ["target_changed"]);
        assert_eq!(reasons(&reason, &none), ["target_changed"]);
    }

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
