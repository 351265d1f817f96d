//! Definition drift: the baseline lockfile and the stage-5 guard built on it.
//!
//! A [`Baseline`] holds the approved canonical definition and hash of every action, under a
//! baseline id derived from its content. It is a JSON file committed next to the application
//! (sorted keys, one field per line, so a review sees exactly what changed):
//!
//! ```json
//! {
//!   "actions": {
//!     "get_build": { "definition": { "consent": "none", "…": "…" }, "hash": "9f2c…" }
//!   },
//!   "baseline_id": "bl_3b1f…",
//!   "format": "sallyport-baseline/1"
//! }
//! ```
//!
//! A [`BaselineGuard`] compares the live catalog with a baseline **once** (at start-up, and
//! again whenever the baseline is replaced) into one [`DriftDecision`] per action, kept in a
//! map; the per-call check at stage 5 is one lookup. Quarantined actions are refused with
//! `definition_drift`, deferred ones with `review_required`, both carrying the decision, which
//! the executor audits (the decision's `receipt_id` is the refusal's audit record).
//!
//! ```
//! # use sallyport_core::{Action, Catalog};
//! # use sallyport_core::drift::{Baseline, BaselineGuard, DriftStatus};
//! # use serde::Deserialize; use schemars::JsonSchema;
//! /// List the builds of one project.
//! #[derive(Action, Deserialize, JsonSchema)]
//! #[action(name = "list_builds", effect = observe)]
//! #[channel(name = "demo")]
//! struct ListBuilds { project_id: String }
//!
//! let catalog = Catalog::builder().action::<ListBuilds>().build()?;
//! let approved = Baseline::from_catalog(&catalog);
//! let guard = BaselineGuard::new(&catalog, approved);
//! assert_eq!(guard.decision("list_builds").unwrap().drift_status, DriftStatus::Clean);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::DefinitionGuard;
use crate::catalog::{Catalog, Entry};
use crate::code::RefusalCode;
use crate::drift::classify::{self, ScoringRule, Verdict};
use crate::drift::{CoreDisposition, DECISION_SCHEMA_VERSION, DefinitionChange, DriftDecision};
use crate::drift::{canonical_json, try_canonical_hash};
use crate::journal::{AttemptId, AuditEvent, Journal, JournalError, Phase, ReceiptId};
use crate::outcome::{Origin, Refusal, Status};

/// The `format` of lockfiles this build writes and reads.
pub const BASELINE_FORMAT: &str = "sallyport-baseline/1";

/// The default lockfile name, next to the application.
pub const DEFAULT_LOCKFILE: &str = "sallyport.baseline.json";

/// One approved action.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BaselineEntry {
    /// SHA-256 of the canonical definition.
    pub hash: String,
    /// The approved canonical definition.
    pub definition: Value,
}

/// A baseline: the approved definitions of a catalog, by action name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Baseline {
    /// Always [`BASELINE_FORMAT`].
    pub format: String,
    /// `bl_` + 32 hex digits of SHA-256 over the approved names and hashes: the same approval
    /// always has the same id.
    pub baseline_id: String,
    /// The approved actions.
    pub actions: BTreeMap<String, BaselineEntry>,
}

/// Why a baseline could not be read, written or changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BaselineError {
    /// The lockfile could not be read or written.
    #[error("cannot access baseline lockfile {path}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The lockfile is not a baseline.
    #[error("{path} is not a sallyport baseline lockfile")]
    Malformed {
        /// The file.
        path: String,
        /// What the parser said.
        #[source]
        source: serde_json::Error,
    },
    /// The lockfile was written in another format.
    #[error("baseline format `{found}` is not `{BASELINE_FORMAT}`")]
    Format {
        /// The format found.
        found: String,
    },
    /// The lockfile's id does not match its content (edited by hand?).
    #[error("baseline id {found} does not match its content (expected {expected})")]
    IdMismatch {
        /// The id in the file.
        found: String,
        /// The id its content has.
        expected: String,
    },
    /// An action to approve is neither in the catalog nor in the baseline.
    #[error("no action named `{0}` in the catalog or the baseline")]
    UnknownAction(String),
}

impl Baseline {
    /// An empty baseline: every action is `tool_added`.
    pub fn empty() -> Self {
        Self::from_actions(BTreeMap::new())
    }

    /// Approves every action of `catalog` as it is.
    pub fn from_catalog(catalog: &Catalog) -> Self {
        Self::from_actions(
            catalog
                .entries()
                .map(|e| (e.spec().name.to_string(), entry_of(e)))
                .collect(),
        )
    }

    fn from_actions(actions: BTreeMap<String, BaselineEntry>) -> Self {
        let baseline_id = baseline_id_of(&actions);
        Self {
            format: BASELINE_FORMAT.to_owned(),
            baseline_id,
            actions,
        }
    }

    /// A new baseline with `names` approved as they are live in `catalog` (a name that is in
    /// the baseline but no longer in the catalog is dropped). No names approves everything:
    /// the result equals [`Baseline::from_catalog`].
    ///
    /// # Errors
    ///
    /// [`BaselineError::UnknownAction`] for a name in neither.
    pub fn approve(&self, catalog: &Catalog, names: &[String]) -> Result<Self, BaselineError> {
        if names.is_empty() {
            return Ok(Self::from_catalog(catalog));
        }
        let mut actions = self.actions.clone();
        for name in names {
            match catalog.get(name) {
                Some(entry) => {
                    actions.insert(name.clone(), entry_of(entry));
                }
                None if actions.remove(name).is_some() => {}
                None => return Err(BaselineError::UnknownAction(name.clone())),
            }
        }
        Ok(Self::from_actions(actions))
    }

    /// Parses a lockfile's text, checking its format and id.
    ///
    /// # Errors
    ///
    /// [`BaselineError::Malformed`], [`BaselineError::Format`] or
    /// [`BaselineError::IdMismatch`]. An entry whose hash does not match its definition is
    /// not an error here: the guard reports it as `canonicalization_error` for that action.
    pub fn from_json(text: &str, path: &str) -> Result<Self, BaselineError> {
        let baseline: Self =
            serde_json::from_str(text).map_err(|source| BaselineError::Malformed {
                path: path.to_owned(),
                source,
            })?;
        if baseline.format != BASELINE_FORMAT {
            return Err(BaselineError::Format {
                found: baseline.format,
            });
        }
        let expected = baseline_id_of(&baseline.actions);
        if baseline.baseline_id != expected {
            return Err(BaselineError::IdMismatch {
                found: baseline.baseline_id,
                expected,
            });
        }
        Ok(baseline)
    }

    /// Reads a lockfile.
    ///
    /// # Errors
    ///
    /// [`BaselineError::Io`] (also when it does not exist), or what [`Baseline::from_json`]
    /// reports.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, BaselineError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| BaselineError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text, &path.display().to_string())
    }

    /// The lockfile text: pretty JSON with sorted keys and a final newline.
    pub fn to_json(&self) -> String {
        // Re-reading the canonical form yields sorted keys whatever serde_json's map order is.
        let value = serde_json::to_value(self)
            .ok()
            .and_then(|v| serde_json::from_str::<Value>(&canonical_json(&v)).ok())
            .unwrap_or(Value::Null);
        let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Writes the lockfile atomically (a temporary file in the same directory, then a rename).
    ///
    /// # Errors
    ///
    /// [`BaselineError::Io`].
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), BaselineError> {
        let path = path.as_ref();
        let io = |source| BaselineError::Io {
            path: path.display().to_string(),
            source,
        };
        let file_name = path
            .file_name()
            .map_or_else(|| "baseline".into(), |n| n.to_string_lossy().into_owned());
        let tmp = path.with_file_name(format!(".{file_name}.tmp"));
        std::fs::write(&tmp, self.to_json()).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}

fn entry_of(entry: &Entry) -> BaselineEntry {
    BaselineEntry {
        hash: entry.definition_hash().to_owned(),
        definition: entry.definition().clone(),
    }
}

fn baseline_id_of(actions: &BTreeMap<String, BaselineEntry>) -> String {
    let mut h = Sha256::new();
    for (name, entry) in actions {
        h.update(name.as_bytes());
        h.update(b"\n");
        h.update(entry.hash.as_bytes());
        h.update(b"\n");
    }
    format!("bl_{}", &hex::encode(h.finalize())[..32])
}

/// Who is comparing: stamped on every decision.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Identity {
    gateway_id: String,
    server_id: String,
}

/// The decisions of one comparison.
#[derive(Clone, Debug)]
struct State {
    baseline: Arc<Baseline>,
    /// Live actions, by name.
    decisions: HashMap<String, Arc<DriftDecision>>,
    /// Baseline actions no longer in the catalog.
    removed: Vec<Arc<DriftDecision>>,
}

/// A permission expansion found by a probe: the actions it quarantines and what was seen.
#[derive(Clone, Debug)]
struct Expansion {
    actions: Vec<String>,
    change: DefinitionChange,
}

/// The stage-5 guard: the live catalog compared with an approved [`Baseline`].
///
/// Comparison happens in [`BaselineGuard::new`] and [`BaselineGuard::replace_baseline`], never
/// per call. Subscribe with [`BaselineGuard::subscribe`] to learn when decisions change (an MCP
/// server sends `notifications/tools/list_changed` then).
pub struct BaselineGuard {
    catalog: Catalog,
    identity: Identity,
    state: RwLock<Arc<State>>,
    expansions: RwLock<HashMap<String, Expansion>>,
    generation: watch::Sender<u64>,
}

impl std::fmt::Debug for BaselineGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BaselineGuard")
            .field("baseline_id", &self.baseline().baseline_id)
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

impl BaselineGuard {
    /// Compares `catalog` with `baseline`. Decisions name gateway `sallyport` and server
    /// `default` until [`BaselineGuard::with_identity`] says otherwise.
    pub fn new(catalog: &Catalog, baseline: Baseline) -> Self {
        let identity = Identity {
            gateway_id: "sallyport".to_owned(),
            server_id: "default".to_owned(),
        };
        let state = compare(catalog, Arc::new(baseline), &identity, &HashMap::new());
        Self {
            catalog: catalog.clone(),
            identity,
            state: RwLock::new(Arc::new(state)),
            expansions: RwLock::new(HashMap::new()),
            generation: watch::channel(0).0,
        }
    }

    /// Reads the lockfile at `path` and compares `catalog` with it.
    ///
    /// # Errors
    ///
    /// What [`Baseline::load`] reports.
    pub fn from_lockfile(catalog: &Catalog, path: impl AsRef<Path>) -> Result<Self, BaselineError> {
        Ok(Self::new(catalog, Baseline::load(path)?))
    }

    /// Names the gateway (this executor deployment) and the server (the application) on every
    /// decision, and compares again.
    #[must_use]
    pub fn with_identity(
        mut self,
        gateway_id: impl Into<String>,
        server_id: impl Into<String>,
    ) -> Self {
        self.identity = Identity {
            gateway_id: gateway_id.into(),
            server_id: server_id.into(),
        };
        let baseline = self.baseline();
        self.recompute(&baseline);
        self
    }

    /// The live catalog the guard compares.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The baseline compared against.
    pub fn baseline(&self) -> Arc<Baseline> {
        Arc::clone(&self.read().baseline)
    }

    /// The decision for live action `name`.
    pub fn decision(&self, name: &str) -> Option<Arc<DriftDecision>> {
        self.read().decisions.get(name).cloned()
    }

    /// Every decision: live actions by name, then removed ones by name.
    pub fn decisions(&self) -> Vec<DriftDecision> {
        let state = self.read();
        let mut live: Vec<&Arc<DriftDecision>> = state.decisions.values().collect();
        live.sort_by(|a, b| a.tool_name.cmp(&b.tool_name));
        live.into_iter()
            .chain(state.removed.iter())
            .map(|d| (**d).clone())
            .collect()
    }

    /// Whether any action drifted.
    pub fn drift_detected(&self) -> bool {
        let state = self.read();
        !state.removed.is_empty() || state.decisions.values().any(|d| d.drift_detected)
    }

    /// Replaces the baseline (after an approval), compares again and bumps the generation.
    /// Returns the new generation.
    pub fn replace_baseline(&self, baseline: Baseline) -> u64 {
        self.recompute(&Arc::new(baseline));
        self.bump()
    }

    /// How many times the decisions changed since the guard was made.
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// A receiver that sees the generation change whenever the decisions do.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Quarantines `actions` because a permission probe of `credential` expected to be denied
    /// was accepted (`effective_permission_expansion`). The quarantine survives baseline
    /// approvals until [`BaselineGuard::clear_permission_expansion`]. Returns the new
    /// generation.
    pub fn record_permission_expansion(
        &self,
        credential: &str,
        actions: Vec<String>,
        change: DefinitionChange,
    ) -> u64 {
        self.expansions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(credential.to_owned(), Expansion { actions, change });
        let baseline = self.baseline();
        self.recompute(&baseline);
        self.bump()
    }

    /// Lifts the quarantine of a permission expansion of `credential` (after a human fixed
    /// the credential's permissions). Returns the new generation.
    pub fn clear_permission_expansion(&self, credential: &str) -> u64 {
        self.expansions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(credential);
        let baseline = self.baseline();
        self.recompute(&baseline);
        self.bump()
    }

    /// Audits the current comparison: appends one record per drifted decision to `journal`
    /// (session `baseline`, the decision in `drift_decision`) and sets each decision's
    /// `receipt_id` to its record. Call it at start-up and after each
    /// [`BaselineGuard::replace_baseline`]; refused calls audit their decision again with
    /// their own receipt. Returns the audited decisions.
    ///
    /// # Errors
    ///
    /// The first journal error; decisions audited before it keep their receipts.
    pub async fn record_decisions(
        &self,
        journal: &dyn Journal,
    ) -> Result<Vec<DriftDecision>, JournalError> {
        let drifted: Vec<DriftDecision> = self
            .decisions()
            .into_iter()
            .filter(|d| d.drift_detected)
            .collect();
        let mut audited = Vec::with_capacity(drifted.len());
        for mut decision in drifted {
            let receipt_id = ReceiptId::generate();
            decision.receipt_id = Some(receipt_id.clone());
            let status = if decision.is_callable() {
                Status::Completed
            } else {
                Status::Rejected
            };
            let event = AuditEvent {
                receipt_id,
                attempt_id: AttemptId::generate(),
                at: crate::clock::now(),
                session_id: "baseline".to_owned(),
                subject: None,
                action: decision.tool_name.clone(),
                definition_hash: decision.live_tool_hash.clone(),
                phase: Phase::Finished,
                status,
                origin: Some(Origin::Executor),
                code: Some(decision.drift_status.as_str().into()),
                reason: Some(decision.summary()),
                objects: Vec::new(),
                note: None,
                request: None,
                consent: None,
                divergences: Vec::new(),
                drift_decision: Some(Box::new(decision.clone())),
                dispatches: 0,
                upstream_status: None,
                approval: None,
                reconciled: None,
                policy: None,
                findings: Vec::new(),
                shadow: None,
                hooks: Vec::new(),
            };
            journal.append(event).await?;
            self.set_receipt(&decision);
            audited.push(decision);
        }
        Ok(audited)
    }

    /// Stores an audited decision's receipt, if the decision is still current.
    fn set_receipt(&self, audited: &DriftDecision) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let current = Arc::make_mut(&mut state);
        if let Some(d) = current.decisions.get_mut(&audited.tool_name)
            && d.decision_id == audited.decision_id
        {
            *d = Arc::new(audited.clone());
        }
        for d in &mut current.removed {
            if d.decision_id == audited.decision_id {
                *d = Arc::new(audited.clone());
            }
        }
    }

    fn bump(&self) -> u64 {
        let mut next = 0;
        self.generation.send_modify(|g| {
            *g += 1;
            next = *g;
        });
        next
    }

    fn recompute(&self, baseline: &Arc<Baseline>) {
        let expansions = self
            .expansions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let state = compare(
            &self.catalog,
            Arc::clone(baseline),
            &self.identity,
            &expansions,
        );
        *self.state.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(state);
    }

    fn read(&self) -> Arc<State> {
        Arc::clone(&self.state.read().unwrap_or_else(PoisonError::into_inner))
    }
}

impl DefinitionGuard for BaselineGuard {
    fn check(&self, action: &str, live_hash: &str) -> Result<(), Refusal> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let Some(decision) = state.decisions.get(action) else {
            return Err(Refusal::new(
                RefusalCode::DefinitionDrift,
                format!("action `{action}` was not compared with the approved baseline"),
            ));
        };
        if decision.live_tool_hash.as_deref() != Some(live_hash) {
            return Err(Refusal::new(
                RefusalCode::DefinitionDrift,
                format!(
                    "action `{action}` changed after it was compared with the approved baseline"
                ),
            ));
        }
        let reasons: Vec<&str> = decision.reasons.iter().map(|r| r.as_str()).collect();
        let reasons = reasons.join(", ");
        match decision.core_disposition {
            CoreDisposition::Allowed => Ok(()),
            CoreDisposition::Denied => Err(Refusal::new(
                RefusalCode::DefinitionDrift,
                format!(
                    "action `{action}` is quarantined: its definition differs from the approved baseline ({reasons}); a human must approve a new baseline"
                ),
            )
            .with_decision((**decision).clone())),
            CoreDisposition::Deferred => Err(Refusal::new(
                RefusalCode::ReviewRequired,
                format!(
                    "action `{action}` changed ({reasons}) and waits for a reviewer to approve the new definition"
                ),
            )
            .with_decision((**decision).clone())),
            CoreDisposition::Error => Err(Refusal::new(
                RefusalCode::DefinitionDrift,
                format!(
                    "action `{action}` could not be compared with the approved baseline ({reasons})"
                ),
            )
            .with_decision((**decision).clone())),
        }
    }
}

fn compare(
    catalog: &Catalog,
    baseline: Arc<Baseline>,
    identity: &Identity,
    expansions: &HashMap<String, Expansion>,
) -> State {
    let issued_at = crate::clock::now();
    let make = |name: &str, live: Option<&str>, approved: Option<&str>, verdict: Verdict| {
        Arc::new(decision(
            identity,
            &baseline.baseline_id,
            &issued_at,
            name,
            live,
            approved,
            verdict,
        ))
    };
    let mut decisions = HashMap::with_capacity(catalog.len());
    for entry in catalog.entries() {
        let name = entry.spec().name.as_ref();
        let live = entry.definition_hash();
        let approved = baseline.actions.get(name);
        let mut rules: Vec<ScoringRule> = Vec::new();
        let mut changes: Vec<DefinitionChange> = Vec::new();
        match approved {
            None => {
                rules.push(classify::TOOL_ADDED);
                changes.push(DefinitionChange {
                    field: String::new(),
                    before: Value::Null,
                    after: entry.definition().clone(),
                });
            }
            Some(approved) => {
                if let Some(e) = entry.canonical_error() {
                    rules.push(classify::CANONICALIZATION);
                    changes.push(DefinitionChange {
                        field: String::new(),
                        before: Value::String(approved.hash.clone()),
                        after: Value::String(format!("not canonicalizable: {e}")),
                    });
                }
                match try_canonical_hash(&approved.definition) {
                    Ok(hash) if hash == approved.hash => {}
                    _ => {
                        rules.push(classify::CANONICALIZATION);
                        changes.push(DefinitionChange {
                            field: "/hash".to_owned(),
                            before: Value::String(approved.hash.clone()),
                            after: Value::String(
                                "the lockfile entry does not match its own definition".to_owned(),
                            ),
                        });
                    }
                }
                if rules.is_empty() && approved.hash != live {
                    let (found, matched) =
                        classify::compare_definitions(&approved.definition, entry.definition());
                    changes.extend(found);
                    rules.extend(matched);
                    if rules.is_empty() {
                        rules.push(classify::UNKNOWN_FIELD);
                    }
                }
            }
        }
        for expansion in expansions.values() {
            if expansion.actions.iter().any(|a| a == name) {
                rules.push(classify::PERMISSION_EXPANSION);
                changes.push(expansion.change.clone());
            }
        }
        changes.sort_by(|a, b| a.field.cmp(&b.field));
        let verdict = Verdict::from_rules(&rules, changes);
        let approved_hash = approved.map(|a| a.hash.as_str());
        decisions.insert(
            name.to_owned(),
            make(name, Some(live), approved_hash, verdict),
        );
    }
    let removed = baseline
        .actions
        .iter()
        .filter(|(name, _)| catalog.get(name).is_none())
        .map(|(name, approved)| {
            let verdict = Verdict::from_rules(
                &[classify::TOOL_REMOVED],
                vec![DefinitionChange {
                    field: String::new(),
                    before: approved.definition.clone(),
                    after: Value::Null,
                }],
            );
            make(name, None, Some(&approved.hash), verdict)
        })
        .collect();
    State {
        baseline,
        decisions,
        removed,
    }
}

fn decision(
    identity: &Identity,
    baseline_id: &str,
    issued_at: &str,
    tool_name: &str,
    live: Option<&str>,
    approved: Option<&str>,
    verdict: Verdict,
) -> DriftDecision {
    let mut h = Sha256::new();
    for part in [
        identity.gateway_id.as_str(),
        identity.server_id.as_str(),
        baseline_id,
        tool_name,
        live.unwrap_or("-"),
        approved.unwrap_or("-"),
    ] {
        h.update(part.as_bytes());
        h.update(b"\n");
    }
    for reason in &verdict.reasons {
        h.update(reason.as_str().as_bytes());
        h.update(b"\n");
    }
    DriftDecision {
        schema_version: DECISION_SCHEMA_VERSION.to_owned(),
        decision_id: format!("dd_{}", &hex::encode(h.finalize())[..32]),
        issued_at: issued_at.to_owned(),
        gateway_id: identity.gateway_id.clone(),
        server_id: identity.server_id.clone(),
        tool_name: tool_name.to_owned(),
        approved_baseline_id: Some(baseline_id.to_owned()),
        live_tool_hash: live.map(str::to_owned),
        baseline_tool_hash: approved.map(str::to_owned),
        drift_detected: verdict.drift_status != super::DriftStatus::Clean,
        drift_status: verdict.drift_status,
        core_disposition: verdict.core_disposition,
        terminal: verdict.terminal,
        severity: verdict.severity,
        risk_score: verdict.risk_score,
        reasons: verdict.reasons,
        changes: verdict.changes,
        recommended_action: verdict.recommended_action,
        receipt_id: None,
    }
}
