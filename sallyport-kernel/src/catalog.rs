//! The catalog: the actions offered to an agent, their schemas and tool exports.

mod export;

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::action::{Action, ActionSpec, ScopedValue, SpecError};
use crate::payload::PayloadGuard;
use sallyport_vocab::drift::{CanonicalError, canonical_hash, try_canonical_hash};

/// The decoded input of one call, type-erased.
pub(crate) struct Decoded {
    pub(crate) input: Arc<dyn Any + Send + Sync>,
    pub(crate) objects: Vec<ScopedValue>,
    pub(crate) note: Option<String>,
}

type DecodeFn = dyn Fn(&Value) -> Result<Decoded, serde_json::Error> + Send + Sync;
type PreconditionFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
type PreconditionFn = dyn Fn(Arc<dyn Any + Send + Sync>) -> PreconditionFuture + Send + Sync;

/// One registered action.
pub struct Entry {
    spec: ActionSpec,
    input_schema: Value,
    definition: Value,
    definition_hash: String,
    canonical_error: Option<CanonicalError>,
    pub(crate) guard: PayloadGuard,
    decode: Box<DecodeFn>,
    precondition: Option<Box<PreconditionFn>>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.spec.name)
            .field("definition_hash", &self.definition_hash)
            .finish_non_exhaustive()
    }
}

impl Entry {
    /// The action card.
    pub fn spec(&self) -> &ActionSpec {
        &self.spec
    }

    /// The input JSON Schema (`additionalProperties: false` on every declared object).
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    /// The canonical definition: everything that changes the action's meaning.
    pub fn definition(&self) -> &Value {
        &self.definition
    }

    /// SHA-256 of the canonical (RFC 8785) definition.
    ///
    /// When the definition has no faithful canonical form ([`Entry::canonical_error`]), this is
    /// the hash of its lossy form; the baseline guard refuses such an action
    /// (`canonicalization_error`).
    pub fn definition_hash(&self) -> &str {
        &self.definition_hash
    }

    /// Why the definition has no faithful RFC 8785 form, if it has none.
    pub fn canonical_error(&self) -> Option<&CanonicalError> {
        self.canonical_error.as_ref()
    }

    fn set_definition(&mut self, provenance: &Provenance) {
        self.definition = definition_of(&self.spec, &self.input_schema, provenance);
        match try_canonical_hash(&self.definition) {
            Ok(hash) => {
                self.definition_hash = hash;
                self.canonical_error = None;
            }
            Err(e) => {
                self.definition_hash = canonical_hash(&self.definition);
                self.canonical_error = Some(e);
            }
        }
    }

    /// Decodes the action's input from `args` where they lie (no copy of the whole value).
    pub(crate) fn decode(&self, args: &Value) -> Result<Decoded, serde_json::Error> {
        (self.decode)(args)
    }

    pub(crate) fn has_precondition(&self) -> bool {
        self.precondition.is_some()
    }

    pub(crate) async fn precheck(&self, input: Arc<dyn Any + Send + Sync>) -> Result<(), String> {
        match &self.precondition {
            Some(check) => check(input).await,
            None => Ok(()),
        }
    }
}

/// A catalog build error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// Two actions share a name.
    #[error("two actions are named `{0}`")]
    DuplicateName(String),
    /// A card breaks a rule of the action model.
    #[error("action `{name}` is invalid")]
    InvalidSpec {
        /// The action.
        name: String,
        /// The rule.
        #[source]
        source: SpecError,
    },
    /// The input schema does not compile.
    #[error("action `{name}` has an invalid input schema: {reason}")]
    InvalidSchema {
        /// The action.
        name: String,
        /// Why.
        reason: String,
    },
    /// A precondition names an action that is not registered.
    #[error("precondition for unregistered action `{0}`")]
    PreconditionForUnknownAction(String),
    /// A reconcile action is not in the catalog.
    #[error("action `{action}` names reconcile action `{reconcile}`, which is not in the catalog")]
    UnknownReconcile {
        /// The action.
        action: String,
        /// The missing reconcile action.
        reconcile: String,
    },
    /// A reconcile action is not read-only.
    #[error("reconcile action `{reconcile}` of `{action}` must be an observe action")]
    ReconcileNotObserve {
        /// The action.
        action: String,
        /// The reconcile action.
        reconcile: String,
    },
}

/// Builds a [`Catalog`].
#[must_use]
#[derive(Default)]
pub struct CatalogBuilder {
    entries: Vec<Result<Entry, CatalogError>>,
    preconditions: Vec<(String, Box<PreconditionFn>)>,
    provenance: Provenance,
    upstream_specs: Vec<(String, String)>,
}

impl std::fmt::Debug for CatalogBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogBuilder")
            .field("entries", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl CatalogBuilder {
    /// Registers action `A`.
    pub fn action<A: Action>(mut self) -> Self {
        self.entries.push(entry_for::<A>(A::spec()));
        self
    }

    /// Registers action `A` with a card changed by `f` (e.g. to point it at another channel).
    pub fn action_with_spec<A: Action>(mut self, f: impl FnOnce(ActionSpec) -> ActionSpec) -> Self {
        self.entries.push(entry_for::<A>(f(A::spec())));
        self
    }

    /// Records where the catalog comes from (the application's crate version, usually
    /// `env!("CARGO_PKG_VERSION")`, and an upstream spec hash). Provenance is part of every
    /// action's definition, so a new release or a changed upstream spec shows as
    /// `provenance_changed` against the baseline.
    pub fn provenance(mut self, provenance: Provenance) -> Self {
        self.provenance = provenance;
        self
    }

    /// Records the hash of the upstream spec (e.g. `sallyport_openapi::OpenApi::hash`)
    /// action `A` was written against, overriding [`Provenance::upstream_spec_hash`] for it.
    pub fn upstream_spec<A: Action>(mut self, spec_hash: impl Into<String>) -> Self {
        self.upstream_specs
            .push((A::NAME.to_owned(), spec_hash.into()));
        self
    }

    /// Adds a read-only precondition to action `A`, checked before consent. `Err(reason)`
    /// refuses the call with `precondition_failed` and the reason.
    pub fn precondition<A, F, Fut>(mut self, check: F) -> Self
    where
        A: Action,
        F: Fn(Arc<A>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let name = A::NAME.to_owned();
        let erased: Box<PreconditionFn> =
            Box::new(
                move |input: Arc<dyn Any + Send + Sync>| match input.downcast::<A>() {
                    Ok(typed) => Box::pin(check(typed)),
                    Err(_) => {
                        Box::pin(async { Err("internal: precondition type mismatch".to_owned()) })
                    }
                },
            );
        self.preconditions.push((name, erased));
        self
    }

    /// Builds the catalog, compiling one payload validator per action.
    ///
    /// # Errors
    ///
    /// The first invalid card or schema, a duplicate name, a precondition for an unknown
    /// action, or a reconcile action that is missing or not read-only.
    pub fn build(self) -> Result<Catalog, CatalogError> {
        let mut entries = BTreeMap::new();
        for entry in self.entries {
            let entry = entry?;
            let name = entry.spec.name.to_string();
            if entries.insert(name.clone(), entry).is_some() {
                return Err(CatalogError::DuplicateName(name));
            }
        }
        for entry in entries.values_mut() {
            let upstream = self
                .upstream_specs
                .iter()
                .rev()
                .find(|(name, _)| *name == entry.spec.name);
            match upstream {
                Some((_, hash)) => {
                    let provenance = self.provenance.clone().with_upstream_spec_hash(hash);
                    entry.set_definition(&provenance);
                }
                None => entry.set_definition(&self.provenance),
            }
        }
        for (name, check) in self.preconditions {
            let entry = entries
                .get_mut(&name)
                .ok_or_else(|| CatalogError::PreconditionForUnknownAction(name.clone()))?;
            entry.precondition = Some(check);
        }
        for entry in entries.values() {
            if let Some(reconcile) = &entry.spec.reconcile {
                let target = entries.get(reconcile.as_ref()).ok_or_else(|| {
                    CatalogError::UnknownReconcile {
                        action: entry.spec.name.to_string(),
                        reconcile: reconcile.to_string(),
                    }
                })?;
                if target.spec.effect.is_mutating() {
                    return Err(CatalogError::ReconcileNotObserve {
                        action: entry.spec.name.to_string(),
                        reconcile: reconcile.to_string(),
                    });
                }
            }
        }
        Ok(Catalog {
            entries: entries.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
        })
    }
}

fn entry_for<A: Action>(spec: ActionSpec) -> Result<Entry, CatalogError> {
    let name = spec.name.to_string();
    spec.check().map_err(|source| CatalogError::InvalidSpec {
        name: name.clone(),
        source,
    })?;
    let input_schema = input_schema_of::<A>();
    let guard = PayloadGuard::new(name.clone(), input_schema.clone())
        .map_err(|reason| CatalogError::InvalidSchema { name, reason })?;
    // The definition is computed in `build`, once the provenance is known.
    Ok(Entry {
        spec,
        input_schema,
        definition: Value::Null,
        definition_hash: String::new(),
        canonical_error: None,
        guard,
        decode: Box::new(|args| {
            let input = A::deserialize(args)?;
            Ok(Decoded {
                objects: input.scope_values(),
                note: input.audit_note(),
                input: Arc::new(input),
            })
        }),
        precondition: None,
    })
}

/// The input schema of `A`, with `additionalProperties: false` on every object schema that
/// declares properties and says nothing about extra ones.
pub fn input_schema_of<A: Action>() -> Value {
    let mut schema = schemars::schema_for!(A).to_value();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
    }
    close_objects(&mut schema);
    schema
}

fn close_objects(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.contains_key("properties") && !map.contains_key("additionalProperties") {
                map.insert("additionalProperties".to_owned(), Value::Bool(false));
            }
            for (key, value) in map.iter_mut() {
                // Skip values that are data, not schemas.
                if key != "enum" && key != "const" && key != "default" && key != "examples" {
                    close_objects(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(close_objects),
        _ => {}
    }
}

/// Where a catalog comes from; part of every action's canonical definition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Provenance {
    /// The application's crate version (`env!("CARGO_PKG_VERSION")`).
    pub crate_version: Option<String>,
    /// SHA-256 of the upstream spec (an OpenAPI document) the actions were written against.
    pub upstream_spec_hash: Option<String>,
}

impl Provenance {
    /// Provenance with the application's crate version.
    pub fn new(crate_version: impl Into<String>) -> Self {
        Self {
            crate_version: Some(crate_version.into()),
            upstream_spec_hash: None,
        }
    }

    /// Sets the upstream spec hash.
    #[must_use]
    pub fn with_upstream_spec_hash(mut self, hash: impl Into<String>) -> Self {
        self.upstream_spec_hash = Some(hash.into());
        self
    }
}

/// The canonical definition of an action: every field that changes its meaning (name,
/// description and summary, input schema, effect, consent, retry, data classes, externality,
/// scope tags, credential binding, reconcile action, channel target with its result mapping,
/// the audit-note field, and provenance).
///
/// The audit-note field is present only when the action has one, and `naturally_idempotent`
/// only when the author declared it, so the definitions (and approved hashes) of actions
/// without them are what they were before they were added. It belongs
/// here because it decides what is sent: a channel keeps the note out of the request unless
/// its template names the field, so moving the note to another field changes what leaves.
pub fn definition_of(spec: &ActionSpec, input_schema: &Value, provenance: &Provenance) -> Value {
    let mut definition = json!({
        "name": spec.name,
        "summary": spec.summary,
        "description": spec.description,
        "input_schema": input_schema,
        "effect": spec.effect,
        "consent": spec.consent,
        "retry": spec.retry,
        "data_classes": spec.data_classes,
        "externality": spec.externality,
        "scope_tags": spec.scope_tags,
        "credential": spec.credential,
        "reconcile": spec.reconcile,
        "target": spec.target,
        "provenance": provenance,
    });
    if let Some(field) = &spec.audit_note_field {
        definition["audit_note"] = json!(field);
    }
    if spec.naturally_idempotent {
        definition["naturally_idempotent"] = json!(true);
    }
    if let Some(reason) = &spec.method_override {
        definition["method_override"] = json!(reason);
    }
    // The answer guards, only when they differ from the defaults (`mask`, `flag`): the
    // definitions of actions that do not declare them are what they were before.
    if spec.secrets != crate::action::SecretMode::default() {
        definition["secrets"] = json!(spec.secrets);
    }
    if spec.instructions != crate::action::InstructionMode::default() {
        definition["instructions"] = json!(spec.instructions);
    }
    // What the action masks of personal data, only when it declares any: loosening a mask
    // (`mask` to `keep`, a kind no longer detected) is drift the baseline sees.
    if !spec.sensitive.is_empty() {
        definition["sensitive"] = json!(spec.sensitive);
    }
    if !spec.personal_data.is_empty() {
        definition["personal_data"] = json!(spec.personal_data);
    }
    definition
}

/// The actions offered to an agent.
///
/// ```
/// # use sallyport_core::{Action, Catalog};
/// # use serde::Deserialize; use schemars::JsonSchema;
/// /// List the builds of one project.
/// #[derive(Action, Deserialize, JsonSchema)]
/// #[action(name = "list_builds", effect = observe)]
/// #[channel(name = "demo")]
/// struct ListBuilds {
///     #[scope(project)]
///     project_id: String,
/// }
///
/// let catalog = Catalog::builder().action::<ListBuilds>().build()?;
/// assert_eq!(catalog.names().collect::<Vec<_>>(), ["list_builds"]);
/// assert_eq!(catalog.get("list_builds").unwrap().input_schema()["additionalProperties"], false);
/// # Ok::<(), sallyport_core::catalog::CatalogError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Catalog {
    entries: BTreeMap<String, Arc<Entry>>,
}

impl Catalog {
    /// A builder.
    pub fn builder() -> CatalogBuilder {
        CatalogBuilder::default()
    }

    /// The action named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Entry>> {
        self.entries.get(name)
    }

    /// Every action name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Every entry, sorted by name.
    pub fn entries(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.entries.values()
    }

    /// How many actions.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The catalog with sallyport's built-in action `A` added (its definition carries
    /// sallyport's own version as provenance).
    pub(crate) fn with_builtin<A: Action>(mut self) -> Result<Self, CatalogError> {
        let mut entry = entry_for::<A>(A::spec())?;
        entry.set_definition(&Provenance::new(concat!(
            "sallyport-core ",
            env!("CARGO_PKG_VERSION")
        )));
        let name = entry.spec.name.to_string();
        if self.entries.contains_key(&name) {
            return Err(CatalogError::DuplicateName(name));
        }
        self.entries.insert(name, Arc::new(entry));
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::action::{ConsentRule, DataClass, EffectClass, Externality, RetryRule};
    use crate::outcome::Status;
    use crate::target::{HttpMethod, HttpTarget, SshTarget, StatusResult, Target};

    fn spec() -> ActionSpec {
        ActionSpec::new("create_deployment", EffectClass::ReversibleChange)
            .with_description("Queue one build. For preview only.")
            .with_data_class(DataClass::INTERNAL)
            .with_scope_tag("project_id", "project")
            .with_credential("deploy-api")
            .with_reconcile("get_deployment")
            .with_target(Target::Http(
                HttpTarget::new(HttpMethod::Post, "/v1/projects/{project_id}/deployments")
                    .with_status(409, Status::AlreadyInDesiredState),
            ))
    }

    fn schema() -> Value {
        json!({"type": "object", "properties": {"project_id": {"type": "string"}},
            "required": ["project_id"], "additionalProperties": false})
    }

    /// Every meaningful field, each with one change.
    const MUTATIONS: usize = 22;

    fn mutate(i: usize, spec: &mut ActionSpec, schema: &mut Value, provenance: &mut Provenance) {
        match i {
            0 => spec.name = "create_deployment_v2".into(),
            1 => spec.summary = "Queue one build now.".into(),
            2 => spec.description = "Queue one build. For staging too.".into(),
            3 => spec.effect = EffectClass::ExternalCommitment,
            4 => spec.consent = ConsentRule::PerCall,
            5 => spec.retry = RetryRule::IdempotencyKey,
            6 => spec.data_classes.push(DataClass::PII),
            7 => spec.externality = Externality::External,
            8 => spec.scope_tags[0].kind = "workspace".into(),
            9 => spec.credential = Some("deploy-admin".into()),
            10 => spec.reconcile = None,
            11 => {
                spec.target = Target::Http(
                    HttpTarget::new(HttpMethod::Put, "/v1/projects/{project_id}/deployments")
                        .with_status(409, Status::AlreadyInDesiredState),
                );
            }
            12 => {
                spec.target = Target::Http(
                    HttpTarget::new(HttpMethod::Post, "/v1/projects/{project_id}/deployments")
                        .with_status(409, Status::Completed),
                );
            }
            13 => spec.target = Target::Ssh(SshTarget::new("{host}", ["deploy", "{build_id}"])),
            14 => schema["properties"]["project_id"]["maxLength"] = json!(64),
            15 => provenance.crate_version = Some("1.0.1".to_owned()),
            16 => provenance.upstream_spec_hash = Some("ab".repeat(32)),
            17 => spec.audit_note_field = Some("reason".into()),
            18 => spec.naturally_idempotent = true,
            19 => spec.method_override = Some("reviewed: it only reads".into()),
            20 => {
                spec.target = Target::Http(
                    HttpTarget::new(HttpMethod::Post, "/v1/projects/{project_id}/deployments")
                        .with_status_result(
                            409,
                            Status::AlreadyInDesiredState,
                            StatusResult::Empty,
                        ),
                );
            }
            21 => {
                spec.target = Target::Http(
                    HttpTarget::new(HttpMethod::Post, "/v1/projects/{project_id}/deployments")
                        .with_status_result(
                            409,
                            Status::AlreadyInDesiredState,
                            StatusResult::Value(json!({"queued": false})),
                        ),
                );
            }
            _ => unreachable!("only {MUTATIONS} mutations"),
        }
    }

    proptest! {
        /// The hash changes if and only if a meaningful field changed, whatever the mix.
        #[test]
        fn every_meaningful_field_changes_the_hash(picks in prop::collection::btree_set(0..MUTATIONS, 0..5)) {
            let provenance = Provenance::new("1.0.0");
            let before = canonical_hash(&definition_of(&spec(), &schema(), &provenance));
            let (mut s, mut sc, mut p) = (spec(), schema(), provenance);
            for i in &picks {
                mutate(*i, &mut s, &mut sc, &mut p);
            }
            let after = canonical_hash(&definition_of(&s, &sc, &p));
            prop_assert_eq!(before == after, picks.is_empty(), "{:?}", picks);
        }
    }

    #[test]
    fn an_action_without_an_audit_note_keeps_its_definition_and_another_field_changes_it() {
        let provenance = Provenance::new("1.0.0");
        let plain = definition_of(&spec(), &schema(), &provenance);
        assert!(plain.get("audit_note").is_none(), "{plain}");
        let mut noted = spec();
        noted.audit_note_field = Some("reason".into());
        let mut moved = spec();
        moved.audit_note_field = Some("justification".into());
        let noted = definition_of(&noted, &schema(), &provenance);
        assert_eq!(noted["audit_note"], "reason");
        assert_ne!(
            canonical_hash(&noted),
            canonical_hash(&definition_of(&moved, &schema(), &provenance))
        );
    }

    #[test]
    fn a_rule_whose_result_is_the_body_keeps_the_definition_it_had() {
        let provenance = Provenance::new("1.0.0");
        let mut explicit = spec();
        explicit.target = Target::Http(
            HttpTarget::new(HttpMethod::Post, "/v1/projects/{project_id}/deployments")
                .with_status_result(409, Status::AlreadyInDesiredState, StatusResult::Body),
        );
        let plain = definition_of(&spec(), &schema(), &provenance);
        assert_eq!(
            plain["target"]["statuses"],
            json!([{"code": 409, "status": "already_in_desired_state"}])
        );
        assert!(plain.get("method_override").is_none(), "{plain}");
        assert_eq!(definition_of(&explicit, &schema(), &provenance), plain);
        let mut answered = spec();
        mutate(21, &mut answered, &mut schema(), &mut provenance.clone());
        assert_eq!(
            definition_of(&answered, &schema(), &provenance)["target"]["statuses"],
            json!([{"code": 409, "status": "already_in_desired_state",
                    "result": {"value": {"queued": false}}}])
        );
        let mut empty = spec();
        mutate(20, &mut empty, &mut schema(), &mut provenance.clone());
        assert_eq!(
            definition_of(&empty, &schema(), &provenance)["target"]["statuses"][0]["result"],
            "empty"
        );
    }

    #[test]
    fn each_mutation_alone_changes_the_hash() {
        let provenance = Provenance::new("1.0.0");
        let before = canonical_hash(&definition_of(&spec(), &schema(), &provenance));
        for i in 0..MUTATIONS {
            let (mut s, mut sc, mut p) = (spec(), schema(), provenance.clone());
            mutate(i, &mut s, &mut sc, &mut p);
            assert_ne!(
                canonical_hash(&definition_of(&s, &sc, &p)),
                before,
                "mutation {i}"
            );
        }
    }
}
