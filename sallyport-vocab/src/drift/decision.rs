//! The Drift Decision Object: the verdict of comparing one action's live definition with the
//! approved baseline, in the shape DESIGN.md fixes (`schema_version` "0.1").

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::ReceiptId;
use crate::string_enum;

/// The `schema_version` of every decision this build writes.
pub const DECISION_SCHEMA_VERSION: &str = "0.1";

string_enum! {
    /// How far a live definition is from the approved one. Ordered from harmless to worst.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum DriftStatus {
        /// Identical to the baseline.
        Clean => "clean",
        /// Different in a way that does not widen what the action can do; callable, monitored.
        Changed => "changed",
        /// Different in a way a reviewer must approve first; not callable until then.
        ReviewRequired => "review_required",
        /// Different in a way that escalates power; denied until a new baseline is approved.
        Quarantined => "quarantined",
    }
}

string_enum! {
    /// What the executor does with the action.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum CoreDisposition {
        /// Calls go ahead.
        Allowed => "allowed",
        /// Calls are refused (`definition_drift`); terminal until a new baseline is approved.
        Denied => "denied",
        /// Calls are refused (`review_required`) until a reviewer approves the new baseline.
        Deferred => "deferred",
        /// The definition could not be compared; calls are refused (`definition_drift`).
        Error => "error",
    }
}

string_enum! {
    /// How bad a drift is. Ordered from harmless to worst.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Severity {
        /// Nothing changed.
        Safe => "safe",
        /// Wording or a narrowing change.
        Low => "low",
        /// A change a reviewer should look at.
        Medium => "medium",
        /// An escalation of power.
        High => "high",
        /// An escalation to the most dangerous effect class.
        Critical => "critical",
    }
}

string_enum! {
    /// What a human should do next.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum RecommendedAction {
        /// Nothing: the action is as approved.
        Allow => "allow",
        /// Keep an eye on it; calls go ahead.
        Monitor => "monitor",
        /// A reviewer must look at the change (`sallyport baseline diff`).
        RequireReview => "require_review",
        /// Approve the new definition into the baseline (`sallyport baseline approve`).
        ApproveNewBaseline => "approve_new_baseline",
        /// Leave it quarantined until the escalation is understood.
        KeepQuarantined => "keep_quarantined",
    }
}

string_enum! {
    /// Why a definition drifted. The codes DESIGN.md lists, plus the ones its classification
    /// needs (`consent_weakened`, `credential_changed`, `target_changed`, …). Sorted by name.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    #[non_exhaustive]
    pub enum ReasonCode {
        /// The definition has no faithful RFC 8785 form (or the lockfile entry does not match its
        /// own hash).
        CanonicalizationError => "canonicalization_error",
        /// The consent rule became stricter.
        ConsentStrengthened => "consent_strengthened",
        /// The consent rule became weaker.
        ConsentWeakened => "consent_weakened",
        /// The credential binding was added, removed or renamed.
        CredentialChanged => "credential_changed",
        /// Data classes were added.
        DataClassesAdded => "data_classes_added",
        /// Data classes were removed.
        DataClassesRemoved => "data_classes_removed",
        /// The description or summary (or a schema annotation) changed.
        DescriptionChanged => "description_changed",
        /// The effect class went down (the action now claims to do less).
        EffectDeescalation => "effect_deescalation",
        /// The effect class went up.
        EffectEscalation => "effect_escalation",
        /// A permission probe expected to be denied was accepted.
        EffectivePermissionExpansion => "effective_permission_expansion",
        /// The externality changed.
        ExternalityChanged => "externality_changed",
        /// A change the classifier cannot read with confidence.
        MetadataConfidenceLow => "metadata_confidence_low",
        /// The crate version or upstream spec hash changed.
        ProvenanceChanged => "provenance_changed",
        /// The reconcile action changed.
        ReconcileChanged => "reconcile_changed",
        /// Required parameters were added or removed.
        RequiredParametersChanged => "required_parameters_changed",
        /// The result mapping (status mapping, result shape, limits) changed.
        ResultMappingChanged => "result_mapping_changed",
        /// The retry rule changed.
        RetryChanged => "retry_changed",
        /// The input schema changed.
        SchemaChanged => "schema_changed",
        /// A scope tag was added, removed or changed.
        ScopeChanged => "scope_changed",
        /// Where the call goes changed: channel, method, path, host, argv, or the fields sent.
        TargetChanged => "target_changed",
        /// The action is not in the baseline.
        ToolAdded => "tool_added",
        /// The baseline action is no longer in the catalog.
        ToolRemoved => "tool_removed",
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
///
/// Not `#[non_exhaustive]`: the baseline guard builds the whole value, so a field added here
/// must be a compile error where it is built, not a default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// 0–100, from the scoring table (`sallyport_core::drift::SCORING_TABLE`).
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
