//! The Drift Decision Object: the verdict of comparing one action's live definition with the
//! approved baseline, in the shape DESIGN.md fixes (`schema_version` "0.1").

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::ReceiptId;

/// The `schema_version` of every decision this build writes.
pub const DECISION_SCHEMA_VERSION: &str = "0.1";

/// How far a live definition is from the approved one. Ordered from harmless to worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftStatus {
    /// Identical to the baseline.
    Clean,
    /// Different in a way that does not widen what the action can do; callable, monitored.
    Changed,
    /// Different in a way a reviewer must approve first; not callable until then.
    ReviewRequired,
    /// Different in a way that escalates power; denied until a new baseline is approved.
    Quarantined,
}

impl DriftStatus {
    /// The snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Clean => "clean",
            Self::Changed => "changed",
            Self::ReviewRequired => "review_required",
            Self::Quarantined => "quarantined",
        }
    }
}

/// What the executor does with the action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CoreDisposition {
    /// Calls go ahead.
    Allowed,
    /// Calls are refused (`definition_drift`); terminal until a new baseline is approved.
    Denied,
    /// Calls are refused (`review_required`) until a reviewer approves the new baseline.
    Deferred,
    /// The definition could not be compared; calls are refused (`definition_drift`).
    Error,
}

impl CoreDisposition {
    /// The snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::Deferred => "deferred",
            Self::Error => "error",
        }
    }
}

/// How bad a drift is. Ordered from harmless to worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Nothing changed.
    Safe,
    /// Wording or a narrowing change.
    Low,
    /// A change a reviewer should look at.
    Medium,
    /// An escalation of power.
    High,
    /// An escalation to the most dangerous effect class.
    Critical,
}

impl Severity {
    /// The snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Safe => "safe",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
            Self::Critical => "critical",
        }
    }
}

/// What a human should do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecommendedAction {
    /// Nothing: the action is as approved.
    Allow,
    /// Keep an eye on it; calls go ahead.
    Monitor,
    /// A reviewer must look at the change (`sallyport baseline diff`).
    RequireReview,
    /// Approve the new definition into the baseline (`sallyport baseline approve`).
    ApproveNewBaseline,
    /// Leave it quarantined until the escalation is understood.
    KeepQuarantined,
}

impl RecommendedAction {
    /// The snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Monitor => "monitor",
            Self::RequireReview => "require_review",
            Self::ApproveNewBaseline => "approve_new_baseline",
            Self::KeepQuarantined => "keep_quarantined",
        }
    }
}

/// Why a definition drifted. The codes DESIGN.md lists, plus the ones its classification
/// needs (`consent_weakened`, `credential_changed`, `target_changed`, …). Sorted by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReasonCode {
    /// The definition has no faithful RFC 8785 form (or the lockfile entry does not match its
    /// own hash).
    CanonicalizationError,
    /// The consent rule became stricter.
    ConsentStrengthened,
    /// The consent rule became weaker.
    ConsentWeakened,
    /// The credential binding was added, removed or renamed.
    CredentialChanged,
    /// Data classes were added.
    DataClassesAdded,
    /// Data classes were removed.
    DataClassesRemoved,
    /// The description or summary (or a schema annotation) changed.
    DescriptionChanged,
    /// The effect class went down (the action now claims to do less).
    EffectDeescalation,
    /// The effect class went up.
    EffectEscalation,
    /// A permission probe expected to be denied was accepted.
    EffectivePermissionExpansion,
    /// The externality changed.
    ExternalityChanged,
    /// A change the classifier cannot read with confidence.
    MetadataConfidenceLow,
    /// The crate version or upstream spec hash changed.
    ProvenanceChanged,
    /// The reconcile action changed.
    ReconcileChanged,
    /// Required parameters were added or removed.
    RequiredParametersChanged,
    /// The result mapping (status mapping, result shape, limits) changed.
    ResultMappingChanged,
    /// The retry rule changed.
    RetryChanged,
    /// The input schema changed.
    SchemaChanged,
    /// A scope tag was added, removed or changed.
    ScopeChanged,
    /// Where the call goes changed: channel, method, path, host, argv, or the fields sent.
    TargetChanged,
    /// The action is not in the baseline.
    ToolAdded,
    /// The baseline action is no longer in the catalog.
    ToolRemoved,
}

impl ReasonCode {
    /// The snake-case code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CanonicalizationError => "canonicalization_error",
            Self::ConsentStrengthened => "consent_strengthened",
            Self::ConsentWeakened => "consent_weakened",
            Self::CredentialChanged => "credential_changed",
            Self::DataClassesAdded => "data_classes_added",
            Self::DataClassesRemoved => "data_classes_removed",
            Self::DescriptionChanged => "description_changed",
            Self::EffectDeescalation => "effect_deescalation",
            Self::EffectEscalation => "effect_escalation",
            Self::EffectivePermissionExpansion => "effective_permission_expansion",
            Self::ExternalityChanged => "externality_changed",
            Self::MetadataConfidenceLow => "metadata_confidence_low",
            Self::ProvenanceChanged => "provenance_changed",
            Self::ReconcileChanged => "reconcile_changed",
            Self::RequiredParametersChanged => "required_parameters_changed",
            Self::ResultMappingChanged => "result_mapping_changed",
            Self::RetryChanged => "retry_changed",
            Self::SchemaChanged => "schema_changed",
            Self::ScopeChanged => "scope_changed",
            Self::TargetChanged => "target_changed",
            Self::ToolAdded => "tool_added",
            Self::ToolRemoved => "tool_removed",
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One changed field: a JSON pointer into the definition (`/effect`, `/input_schema/required`)
/// with the approved and the live value (`null` when absent).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DefinitionChange {
    /// JSON pointer into the canonical definition.
    pub field: String,
    /// The approved value.
    pub before: Value,
    /// The live value.
    pub after: Value,
}

/// The Drift Decision Object for one action (DESIGN.md, "Drift").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DriftDecision {
    /// Always [`DECISION_SCHEMA_VERSION`].
    pub schema_version: String,
    /// `dd_` + 32 hex digits, derived from the baseline id, the action and both hashes: the
    /// same comparison always has the same id.
    pub decision_id: String,
    /// RFC 3339 time of the comparison.
    pub issued_at: String,
    /// The gateway (executor deployment) that compared.
    pub gateway_id: String,
    /// The server (application) whose catalog was compared.
    pub server_id: String,
    /// The action.
    pub tool_name: String,
    /// The baseline compared against; `None` when there is none.
    pub approved_baseline_id: Option<String>,
    /// The live definition hash; `None` for a removed action.
    pub live_tool_hash: Option<String>,
    /// The approved definition hash; `None` for an action not in the baseline.
    pub baseline_tool_hash: Option<String>,
    /// Whether anything differs.
    pub drift_detected: bool,
    /// How far from the baseline.
    pub drift_status: DriftStatus,
    /// What the executor does.
    pub core_disposition: CoreDisposition,
    /// Whether only a new baseline can lift the refusal (quarantine).
    pub terminal: bool,
    /// How bad.
    pub severity: Severity,
    /// 0–100, from the scoring table ([`crate::drift::SCORING_TABLE`]).
    pub risk_score: u8,
    /// Why, sorted and without duplicates.
    pub reasons: Vec<ReasonCode>,
    /// What changed, sorted by field.
    pub changes: Vec<DefinitionChange>,
    /// What a human should do.
    pub recommended_action: RecommendedAction,
    /// The audit record of the refusal that carried this decision; `None` until audited.
    pub receipt_id: Option<ReceiptId>,
}

impl DriftDecision {
    /// The minimal partner form (what an agent or a partner system is shown).
    pub fn partner(&self) -> PartnerDecision {
        PartnerDecision {
            server_id: self.server_id.clone(),
            tool_name: self.tool_name.clone(),
            drift_status: self.drift_status,
            core_disposition: self.core_disposition,
            severity: self.severity,
            reasons: self.reasons.clone(),
            recommended_action: self.recommended_action,
            receipt_id: self.receipt_id.clone(),
        }
    }

    /// Whether calls to the action may go ahead.
    pub fn is_callable(&self) -> bool {
        self.core_disposition == CoreDisposition::Allowed
    }

    /// One line for a human: `tool: status/disposition severity(score) reasons`.
    pub fn summary(&self) -> String {
        let reasons: Vec<&str> = self.reasons.iter().map(|r| r.as_str()).collect();
        let mut out = format!(
            "{}: {} ({}), severity {} ({}), recommended {}",
            self.tool_name,
            self.drift_status.as_str(),
            self.core_disposition.as_str(),
            self.severity.as_str(),
            self.risk_score,
            self.recommended_action.as_str()
        );
        if !reasons.is_empty() {
            out.push_str(&format!("; reasons: {}", reasons.join(", ")));
        }
        out
    }
}

/// The minimal partner form of a [`DriftDecision`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PartnerDecision {
    /// The server (application).
    pub server_id: String,
    /// The action.
    pub tool_name: String,
    /// How far from the baseline.
    pub drift_status: DriftStatus,
    /// What the executor does.
    pub core_disposition: CoreDisposition,
    /// How bad.
    pub severity: Severity,
    /// Why.
    pub reasons: Vec<ReasonCode>,
    /// What a human should do.
    pub recommended_action: RecommendedAction,
    /// The audit record.
    pub receipt_id: Option<ReceiptId>,
}
