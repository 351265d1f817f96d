//! [Cedar](https://www.cedarpolicy.com) policies at sallyport's authorize stage.
//!
//! A [`CedarPolicy`] is a [`sallyport_core::policy::Policy`]: give it to
//! [`ExecutorBuilder::policy_arc`](sallyport_core::executor::ExecutorBuilder::policy_arc)
//! and every call that passed the scope check is authorized by Cedar before anything else
//! happens (no consent is asked, nothing is sent, for a call Cedar denies).
//!
//! # The request Cedar sees
//!
//! | Cedar | from the call |
//! |---|---|
//! | principal | `Session::"<session id>"`, attribute `requester` (when the host set one), and the host's session attributes as **tags** (`principal.hasTag("team") && principal.getTag("team") == "billing"`) |
//! | action | `Action::"<action name>"` |
//! | resource | each scoped object: `<scope kind>::"<value>"` (`customer::"cus_7"`); a call that names none has `Unscoped::"<action name>"` |
//! | `context.effect`, `.externality`, `.consent` | the card's effect class, externality and consent rule, as their snake-case strings |
//! | `context.data_classes` | the card's data classes, a `Set<String>` |
//! | `context.args` | the fields the author marked `#[policy]`, typed from the input schema (`String`, `Long`, `Boolean`, `Set<…>`; an optional field is an optional attribute: test it with `has`) |
//! | `context.calls.minute`, `.hour`, `.day` | how many earlier calls of this action this session made that the policy let through, in the last minute, hour and day (shared by every process on the journal when it offers a store, else per process: see [`sallyport_core::policy`]) |
//! | `context.session_calls.by_effect.<effect>.minute`, `.hour`, `.day` | the same, for the session's calls of any action, by effect class (`observe`, `reversible_change`, `external_commitment`, `irreversible_or_broad`) |
//! | `context.session_calls.recent` | the session's most recent calls the policy let through (newest first in sallyport; a `Set` in Cedar), each `{action, effect, objects, age_seconds, status?}`: `objects` a `Set<String>` of `"<kind>::<value>"`, `status` absent until the call ended |
//! | `context.session_calls.complete` | whether `recent` holds every such call of the last day |
//! | `context.session_calls.completed_on_resource` | the actions of the recent calls that named this authorization's resource and ended `completed`, a `Set<String>` |
//!
//! **One authorization per object**: a call that names two objects is authorized twice, and
//! every authorization must allow. Any deny denies the call; any `@consent("required")`
//! permit (below) requires consent for the call.
//!
//! # Decisions
//!
//! - **deny**: Cedar denies (a `forbid` matched, or no `permit` did). The refusal's reason is
//!   the `@reason("…")` annotation of the `forbid` that matched, else a sentence naming it;
//!   the audit record names the policies by their `@id("…")` (Cedar's `policy0`, … without
//!   one).
//! - **require consent**: Cedar allows, and a `permit` that allowed it carries
//!   `@consent("required")`. Stage 8 then asks a human for this one call, whatever the
//!   action's own rule. The annotation is only for `permit`s; any other value than
//!   `"required"`, or on a `forbid`, is a load error.
//! - **allow**: Cedar allows, and no permit that allowed it asks for consent.
//! - An evaluation error (Cedar skips a policy that errs, which could skip a `forbid`) denies
//!   the call: fail closed.
//!
//! ```cedar
//! @id("invoices-for-billing")
//! permit (principal, action == Action::"create_invoice", resource is customer)
//! when { principal.hasTag("team") && principal.getTag("team") == "billing" };
//!
//! @id("large-invoices-need-a-human")
//! @consent("required")
//! permit (principal, action == Action::"create_invoice", resource)
//! when { context.args.amount_cents > 100000 };
//!
//! @id("five-invoices-an-hour")
//! @reason("at most 5 invoices per session per hour")
//! forbid (principal, action == Action::"create_invoice", resource)
//! when { context.calls.hour >= 5 };
//!
//! @id("three-commitments-an-hour")
//! @reason("at most 3 external commitments per session per hour")
//! forbid (principal, action, resource)
//! when { context.effect == "external_commitment" &&
//!        context.session_calls.by_effect.external_commitment.hour >= 3 };
//!
//! @id("read-before-delete")
//! @reason("read the invoice in this session before deleting it")
//! forbid (principal, action == Action::"delete_invoice", resource)
//! unless { context.session_calls.completed_on_resource.contains("get_invoice") };
//! ```
//!
//! Cedar has no quantifier over a set, so a rule about one earlier call reads the
//! precomputed `completed_on_resource`; `recent` is there for rules that test the whole
//! record (`containsAny`) and for the audit of what the policy saw. The recent calls are
//! bounded ([`ExecutorBuilder::policy_recent_calls`](sallyport_core::executor::ExecutorBuilder::policy_recent_calls)):
//! a read older than the bound is not in `completed_on_resource`, and such a rule then
//! denies (fail closed).
//!
//! # Validation and reloading
//!
//! The catalog's Cedar schema ([`schema_json`], printable with
//! [`CedarPolicy::schema_text`]) validates the policies (strict mode) when they are loaded:
//! a policy naming an unknown action, an attribute the context does not have, or comparing a
//! string with a number is an error carrying Cedar's message, at start-up. A policy file is
//! re-read by [`CedarPolicy::reload`] or, every few seconds, by [`CedarPolicy::watch`]; a
//! new text that fails to load leaves the last good policies in force, and the error is
//! logged and kept ([`CedarPolicy::last_error`]).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use sallyport_core::{Catalog, Executor};
//! # use sallyport_cedar::CedarPolicy;
//! # async fn demo(catalog: Catalog, journal: sallyport_core::journal::SqliteJournal) -> Result<(), Box<dyn std::error::Error>> {
//! let policy = Arc::new(CedarPolicy::from_file(&catalog, "policies/invoices.cedar")?);
//! let _watch = policy.watch(std::time::Duration::from_secs(2));
//! let executor = Executor::builder(catalog)
//!     .journal(journal)
//!     .policy_arc(policy.clone())
//!     .build()?;
//! # Ok(()) }
//! ```

mod decision;
mod error;
mod schema;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use cedar_policy::{
    Authorizer, Context, Decision, Effect, Entities, Entity, EntityId, EntityTypeName, EntityUid,
    PolicyId, PolicySet, Request, RestrictedExpression, Schema, SchemaFragment, ValidationMode,
    Validator,
};
use miette::Diagnostic;
use sallyport_core::policy::{
    CallCounts, Policy, PolicyDecision, PolicyRequest, PolicyVerdict, SessionCalls,
};
use sallyport_core::{Catalog, EffectClass, Status};
use serde_json::{Map, Value, json};

pub use crate::decision::{CedarDecisionPolicy, DECISION_SCHEMA};
pub use crate::error::CedarError;
pub use crate::schema::schema_json;

/// The annotation that makes a `permit` require a human's approval: `@consent("required")`.
pub const CONSENT_ANNOTATION: &str = "consent";
/// The annotation whose text is a `forbid`'s refusal reason: `@reason("…")`.
pub const REASON_ANNOTATION: &str = "reason";
/// The annotation that names a policy in audit records: `@id("…")`.
pub const ID_ANNOTATION: &str = "id";

/// Cedar policies validated against a catalog's schema, reloadable. See the
/// [crate] docs.
pub struct CedarPolicy {
    name: String,
    path: Option<PathBuf>,
    schema: Schema,
    schema_json: Value,
    validator: Validator,
    authorizer: Authorizer,
    current: RwLock<Arc<Loaded>>,
    last_error: RwLock<Option<String>>,
    generation: AtomicU64,
}

/// One loaded policy set and the text it came from.
struct Loaded {
    text: String,
    policies: PolicySet,
}

impl std::fmt::Debug for CedarPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CedarPolicy")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("policies", &self.read().policies.policies().count())
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

impl CedarPolicy {
    /// Policies from `text`, validated against `catalog`'s schema; `name` names them in
    /// audit records and errors.
    ///
    /// # Errors
    ///
    /// [`CedarError::Parse`], [`CedarError::Validation`] or [`CedarError::Annotation`] for
    /// the policies, [`CedarError::Schema`] or [`CedarError::UnsupportedField`] for the
    /// catalog.
    pub fn from_text(
        catalog: &Catalog,
        name: impl Into<String>,
        text: &str,
    ) -> Result<Self, CedarError> {
        Self::new(catalog, name.into(), None, text)
    }

    /// Policies from the file at `path` (named by its file name), validated against
    /// `catalog`'s schema; [`CedarPolicy::reload`] and [`CedarPolicy::watch`] read it again.
    ///
    /// # Errors
    ///
    /// [`CedarError::Io`], and what [`CedarPolicy::from_text`] reports.
    pub fn from_file(catalog: &Catalog, path: impl AsRef<Path>) -> Result<Self, CedarError> {
        let path = path.as_ref();
        let text = read(path)?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Self::new(catalog, name, Some(path.to_owned()), &text)
    }

    fn new(
        catalog: &Catalog,
        name: String,
        path: Option<PathBuf>,
        text: &str,
    ) -> Result<Self, CedarError> {
        let schema_json = schema_json(catalog)?;
        let schema = Schema::from_json_value(schema_json.clone())
            .map_err(|e| CedarError::Schema(cedar_message(&e)))?;
        let validator = Validator::new(schema.clone());
        let policies = load(&validator, &name, text)?;
        Ok(Self {
            name,
            path,
            schema,
            schema_json,
            validator,
            authorizer: Authorizer::new(),
            current: RwLock::new(Arc::new(Loaded {
                text: text.to_owned(),
                policies,
            })),
            last_error: RwLock::new(None),
            generation: AtomicU64::new(0),
        })
    }

    /// The catalog's schema in Cedar's schema syntax, for policy authors (and Cedar's own
    /// tools).
    pub fn schema_text(&self) -> String {
        SchemaFragment::from_json_value(self.schema_json.clone())
            .ok()
            .and_then(|fragment| fragment.to_cedarschema().ok())
            .unwrap_or_else(|| self.schema_json.to_string())
    }

    /// Replaces the policies with `text` when it differs from the current text and loads.
    /// Returns whether the policies changed. A text that fails to load leaves the current
    /// policies in force; its error is logged and kept as [`CedarPolicy::last_error`].
    ///
    /// # Errors
    ///
    /// What [`CedarPolicy::from_text`] reports for the policies.
    pub fn replace(&self, text: &str) -> Result<bool, CedarError> {
        if self.read().text == text {
            return Ok(false);
        }
        match load(&self.validator, &self.name, text) {
            Ok(policies) => {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(Loaded {
                    text: text.to_owned(),
                    policies,
                });
                *self
                    .last_error
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = None;
                let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
                tracing::info!(policy = %self.name, generation, "Cedar policies replaced");
                Ok(true)
            }
            Err(error) => Err(self.rejected(error)),
        }
    }

    /// Reads the policy file again ([`CedarPolicy::replace`] with its text). Returns whether
    /// the policies changed; `false` for policies made from text.
    ///
    /// # Errors
    ///
    /// [`CedarError::Io`] (the current policies stay), and what [`CedarPolicy::replace`]
    /// reports.
    pub fn reload(&self) -> Result<bool, CedarError> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        let text = read(path).map_err(|e| self.rejected(e))?;
        self.replace(&text)
    }

    /// Re-reads the policy file every `every` on the current tokio runtime and replaces the
    /// policies ([`CedarPolicy::replace`]) with a new text once two consecutive reads agree,
    /// so a file caught half-written is never loaded (write it atomically all the same: a
    /// temporary file, then a rename). A file that is missing or does not load leaves the
    /// current policies in force (logged once per distinct text). Stops when the returned task
    /// is aborted. Policies made from text have no file: the task ends at once.
    pub fn watch(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let policy = Arc::clone(self);
        tokio::spawn(async move {
            let Some(path) = policy.path.clone() else {
                return;
            };
            let mut seen = policy.read().text.clone();
            let mut pending: Option<String> = None;
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let Ok(text) = tokio::fs::read_to_string(&path).await else {
                    continue;
                };
                if text == seen {
                    pending = None;
                    continue;
                }
                if pending.as_deref() != Some(text.as_str()) {
                    pending = Some(text);
                    continue;
                }
                // Errors are logged and kept by `replace`.
                let _ = policy.replace(&text);
                seen = text;
                pending = None;
            }
        })
    }

    /// The error of the last reload or replacement that failed, if no later one succeeded:
    /// the policies in force are the last good ones.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many times the policies were replaced since they were first loaded.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The text of the policies in force.
    pub fn text(&self) -> String {
        self.read().text.clone()
    }

    fn read(&self) -> Arc<Loaded> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn rejected(&self, error: CedarError) -> CedarError {
        let text = error_text(&error);
        tracing::warn!(policy = %self.name, error = %text, "Cedar policies not replaced; the last good ones stay in force");
        *self
            .last_error
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(text);
        error
    }

    /// Authorizes the call once per object and combines the answers.
    fn evaluate(&self, request: &PolicyRequest<'_>) -> Result<PolicyDecision, String> {
        let loaded = self.read();
        let session_type = type_name(schema::SESSION)?;
        let principal = EntityUid::from_type_name_and_id(
            session_type,
            EntityId::new(request.session.id().as_str()),
        );
        let action =
            EntityUid::from_type_name_and_id(type_name("Action")?, EntityId::new(request.action));
        let mut resources: BTreeSet<(String, String)> = request
            .objects
            .iter()
            .map(|o| (o.kind.clone(), o.value.clone()))
            .collect();
        if resources.is_empty() {
            resources.insert((schema::UNSCOPED.to_owned(), request.action.to_owned()));
        }
        let mut entities = vec![principal_entity(request, principal.clone())?];
        let mut uids = Vec::with_capacity(resources.len());
        for (kind, value) in &resources {
            let uid = EntityUid::from_type_name_and_id(type_name(kind)?, EntityId::new(value));
            entities.push(Entity::with_uid(uid.clone()));
            uids.push((uid, kind, value));
        }
        let entities = Entities::from_entities(entities, Some(&self.schema)).map_err(|e| {
            format!(
                "the call's entities do not fit the policy schema: {}",
                cedar_message(&e)
            )
        })?;
        let mut verdict = PolicyVerdict::Allow;
        let mut reason: Option<String> = None;
        let mut rules: Vec<String> = Vec::new();
        let now_ms = sallyport_core::clock::now_ms();
        for (uid, kind, value) in uids {
            // Per object: `session_calls.completed_on_resource` is about this resource.
            let context = Context::from_json_value(
                context_json(request, kind, value, now_ms),
                Some((&self.schema, &action)),
            )
            .map_err(|e| {
                format!(
                    "the call's context does not fit the policy schema: {}",
                    cedar_message(&e)
                )
            })?;
            let cedar_request = Request::new(
                principal.clone(),
                action.clone(),
                uid,
                context,
                Some(&self.schema),
            )
            .map_err(|e| {
                format!(
                    "the call does not fit the policy schema: {}",
                    cedar_message(&e)
                )
            })?;
            let response =
                self.authorizer
                    .is_authorized(&cedar_request, &loaded.policies, &entities);
            let diagnostics = response.diagnostics();
            if let Some(error) = diagnostics.errors().next() {
                return Ok(PolicyDecision::deny(format!(
                    "a policy could not be evaluated ({}), so the call is denied",
                    cedar_message(error)
                ))
                .with_rule(error_policy(error)));
            }
            // Cedar gives the deciding policies as a set: sorted, for stable records.
            let mut ids: Vec<&PolicyId> = diagnostics.reason().collect();
            ids.sort_by_key(|id| id.to_string());
            let object = if kind == schema::UNSCOPED {
                String::new()
            } else {
                format!(" for {kind} {value}")
            };
            match response.decision() {
                Decision::Deny => {
                    let stated = ids
                        .iter()
                        .find_map(|id| loaded.policies.annotation(id, REASON_ANNOTATION));
                    let why = match (stated, ids.first()) {
                        (Some(text), _) => format!("{text}{object}"),
                        (None, Some(id)) => format!("forbidden by policy `{id}`{object}"),
                        (None, None) => format!("no policy permits this call{object}"),
                    };
                    let mut decision = PolicyDecision::deny(why);
                    for id in ids {
                        decision = decision.with_rule(id.to_string());
                    }
                    return Ok(decision);
                }
                Decision::Allow => {
                    let asking = ids.iter().find(|id| {
                        loaded.policies.annotation(id, CONSENT_ANNOTATION) == Some("required")
                    });
                    if let Some(id) = asking
                        && verdict == PolicyVerdict::Allow
                    {
                        verdict = PolicyVerdict::RequireConsent;
                        reason = Some(
                            loaded
                                .policies
                                .annotation(id, REASON_ANNOTATION)
                                .map_or_else(
                                    || format!("policy `{id}` requires a human's approval{object}"),
                                    |text| format!("{text}{object}"),
                                ),
                        );
                    }
                    for id in ids {
                        let id = id.to_string();
                        if !rules.contains(&id) {
                            rules.push(id);
                        }
                    }
                }
            }
        }
        let mut decision = match (verdict, reason) {
            (PolicyVerdict::RequireConsent, Some(reason)) => {
                PolicyDecision::require_consent(reason)
            }
            _ => PolicyDecision::allow(),
        };
        for rule in rules {
            decision = decision.with_rule(rule);
        }
        Ok(decision)
    }
}

impl Policy for CedarPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn decide(&self, request: &PolicyRequest<'_>) -> PolicyDecision {
        self.evaluate(request)
            .unwrap_or_else(|reason| PolicyDecision::deny(format!("{reason}; the call is denied")))
    }
}

fn read(path: &Path) -> Result<String, CedarError> {
    std::fs::read_to_string(path).map_err(|source| CedarError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Parses `text`, names each policy by its `@id`, checks this crate's annotations and
/// validates the set against the schema.
fn load(validator: &Validator, name: &str, text: &str) -> Result<PolicySet, CedarError> {
    let parsed = PolicySet::from_str(text).map_err(|e| CedarError::Parse {
        name: name.to_owned(),
        message: cedar_message(&e),
    })?;
    let annotation = |policy: &str, message: String| CedarError::Annotation {
        name: name.to_owned(),
        policy: policy.to_owned(),
        message,
    };
    if let Some(template) = parsed.templates().next() {
        return Err(annotation(
            template.id().as_ref(),
            "templates (policies with ?principal or ?resource slots) are not supported; write static policies".to_owned(),
        ));
    }
    let mut set = PolicySet::new();
    let mut ids = HashSet::new();
    for policy in parsed.policies() {
        let id = policy
            .annotation(ID_ANNOTATION)
            .map_or_else(|| policy.id().to_string(), str::to_owned);
        if !ids.insert(id.clone()) {
            return Err(annotation(&id, "another policy has the same id".to_owned()));
        }
        match (policy.annotation(CONSENT_ANNOTATION), policy.effect()) {
            (None, _) | (Some("required"), Effect::Permit) => {}
            (Some("required"), Effect::Forbid) => {
                return Err(annotation(
                    &id,
                    "`@consent(\"required\")` goes on a `permit`: a `forbid` denies".to_owned(),
                ));
            }
            (Some(other), _) => {
                return Err(annotation(
                    &id,
                    format!("`@consent(\"{other}\")`: the only value is \"required\""),
                ));
            }
        }
        set.add(policy.new_id(PolicyId::new(&id)))
            .map_err(|e| annotation(&id, cedar_message(&e)))?;
    }
    let result = validator.validate(&set, ValidationMode::Strict);
    if !result.validation_passed() {
        let message: Vec<String> = result
            .validation_errors()
            .map(|e| cedar_message(e))
            .collect();
        return Err(CedarError::Validation {
            name: name.to_owned(),
            message: message.join("; "),
        });
    }
    Ok(set)
}

/// Cedar's message for `error`, with its help when it has some.
fn cedar_message(error: &dyn Diagnostic) -> String {
    match error.help() {
        Some(help) => format!("{error} (help: {help})"),
        None => error.to_string(),
    }
}

/// An error and its sources, on one line.
fn error_text(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn error_policy(error: &cedar_policy::AuthorizationError) -> String {
    let cedar_policy::AuthorizationError::PolicyEvaluationError(e) = error;
    e.policy_id().to_string()
}

fn type_name(name: &str) -> Result<EntityTypeName, String> {
    EntityTypeName::from_str(name)
        .map_err(|e| format!("`{name}` is not a Cedar entity type: {}", cedar_message(&e)))
}

fn context_json(request: &PolicyRequest<'_>, kind: &str, value: &str, now_ms: u64) -> Value {
    let classes: Vec<&str> = request.data_classes.iter().map(|c| c.as_str()).collect();
    json!({
        "effect": request.effect.as_str(),
        "externality": request.externality.as_str(),
        "consent": request.consent.as_str(),
        "data_classes": classes,
        "calls": counts_json(request.calls),
        "session_calls": session_calls_json(request.session_calls, kind, value, now_ms),
        "args": schema::args_value(request.arguments),
    })
}

fn counts_json(counts: CallCounts) -> Value {
    json!({"minute": counts.minute, "hour": counts.hour, "day": counts.day})
}

/// `context.session_calls`: the session's counts by effect class, its recent calls, and
/// the actions of those that completed on the resource `kind::value` (see [`schema`]).
fn session_calls_json(calls: &SessionCalls, kind: &str, value: &str, now_ms: u64) -> Value {
    let mut by_effect = Map::new();
    for effect in EffectClass::ALL {
        by_effect.insert(
            effect.as_str().to_owned(),
            counts_json(calls.by_effect.of(*effect)),
        );
    }
    let recent: Vec<Value> = calls
        .recent
        .iter()
        .map(|call| {
            let objects: Vec<String> = call
                .objects
                .iter()
                .map(|o| format!("{}::{}", o.kind, o.value))
                .collect();
            let mut record = json!({
                "action": call.action,
                "effect": call.effect.as_str(),
                "objects": objects,
                "age_seconds": now_ms.saturating_sub(call.at_ms) / 1_000,
            });
            if let Some(status) = call.status {
                record["status"] = json!(status.as_str());
            }
            record
        })
        .collect();
    let completed: BTreeSet<&str> = calls
        .recent
        .iter()
        .filter(|call| call.status == Some(Status::Completed) && call.names(kind, value))
        .map(|call| call.action.as_str())
        .collect();
    json!({
        "by_effect": by_effect,
        "recent": recent,
        "complete": calls.complete,
        "completed_on_resource": completed,
    })
}

fn principal_entity(request: &PolicyRequest<'_>, uid: EntityUid) -> Result<Entity, String> {
    let mut attrs = HashMap::new();
    if let Some(requester) = request.session.requester() {
        attrs.insert(
            "requester".to_owned(),
            RestrictedExpression::new_string(requester.to_owned()),
        );
    }
    let tags = request
        .session
        .attributes()
        .iter()
        .map(|(k, v)| (k.clone(), RestrictedExpression::new_string(v.clone())));
    Entity::new_with_tags(uid, attrs, [], tags).map_err(|e| {
        format!(
            "the session does not fit the policy schema: {}",
            cedar_message(&e)
        )
    })
}

#[cfg(test)]
mod tests {
    use sallyport_core::action::ScopedValue;
    use sallyport_core::policy::{CallCounts, visible_arguments};
    use sallyport_core::{Action, Session};
    use schemars::JsonSchema;
    use serde::Deserialize;

    use super::*;

    /// Move one repository from one project to another.
    #[derive(Action, Deserialize, JsonSchema)]
    #[action(name = "move_repository", effect = irreversible_or_broad)]
    #[channel(name = "git")]
    #[allow(dead_code, reason = "decided, never decoded")]
    struct MoveRepository {
        #[scope(project)]
        from: String,
        #[scope(project)]
        to: String,
        #[policy]
        archive: Option<bool>,
    }

    fn catalog() -> Catalog {
        Catalog::builder()
            .action::<MoveRepository>()
            .build()
            .expect("catalog")
    }

    fn decide(policy: &CedarPolicy, from: &str, to: &str, archive: Option<bool>) -> PolicyDecision {
        let spec = MoveRepository::spec();
        let session = Session::new("s1").requested_by("alice");
        let objects = [
            ScopedValue::new("project", "from", from),
            ScopedValue::new("project", "to", to),
        ];
        let arguments =
            visible_arguments(&spec, &json!({"from": from, "to": to, "archive": archive}));
        policy.decide(&PolicyRequest::new(
            &session,
            &spec,
            &objects,
            &arguments,
            CallCounts::default(),
        ))
    }

    const POLICIES: &str = r#"
        @id("alice-moves")
        permit (principal, action == Action::"move_repository", resource is project)
        when { principal has requester && principal.requester == "alice" };

        @id("archiving-needs-a-human")
        @consent("required")
        permit (principal, action == Action::"move_repository", resource == project::"archive")
        when { context.args has archive && context.args.archive };

        @id("prod-is-frozen")
        @reason("prod is frozen")
        forbid (principal, action, resource == project::"prod");
    "#;

    #[test]
    fn every_object_is_authorized_and_every_one_must_allow() {
        let policy = CedarPolicy::from_text(&catalog(), "repos.cedar", POLICIES).expect("load");
        assert_eq!(
            decide(&policy, "dev", "staging", None),
            PolicyDecision::allow().with_rule("alice-moves")
        );
        // Either side forbidden denies the call, naming the object.
        for (from, to) in [("prod", "dev"), ("dev", "prod")] {
            let decision = decide(&policy, from, to, None);
            assert_eq!(decision.verdict, PolicyVerdict::Deny, "{from} -> {to}");
            assert_eq!(
                decision.reason.as_deref(),
                Some("prod is frozen for project prod")
            );
            assert_eq!(decision.rules, ["prod-is-frozen"]);
        }
        // A consent permit on one object requires consent for the call.
        let decision = decide(&policy, "dev", "archive", Some(true));
        assert_eq!(decision.verdict, PolicyVerdict::RequireConsent);
        assert_eq!(
            decision.reason.as_deref(),
            Some(
                "policy `archiving-needs-a-human` requires a human's approval for project archive"
            )
        );
        assert_eq!(decision.rules, ["alice-moves", "archiving-needs-a-human"]);
        // An absent optional argument is an absent attribute (`has` is false).
        assert_eq!(
            decide(&policy, "dev", "archive", None).verdict,
            PolicyVerdict::Allow
        );
    }

    #[test]
    fn the_schema_names_the_session_the_scope_kinds_and_the_marked_arguments() {
        let schema = schema_json(&catalog()).expect("schema");
        let action = &schema[""]["actions"]["move_repository"]["appliesTo"];
        assert_eq!(action["principalTypes"], json!(["Session"]));
        assert_eq!(action["resourceTypes"], json!(["project", "Unscoped"]));
        assert_eq!(
            action["context"]["attributes"]["args"],
            json!({"type": "Record", "attributes": {"archive": {"type": "Boolean", "required": false}}})
        );
        assert_eq!(
            schema[""]["entityTypes"]["Session"]["tags"],
            json!({"type": "String"})
        );
        let policy = CedarPolicy::from_text(&catalog(), "repos.cedar", POLICIES).expect("load");
        let text = policy.schema_text();
        assert!(text.contains("entity Session"), "{text}");
        assert!(text.contains("move_repository"), "{text}");
    }

    #[test]
    fn a_template_and_a_duplicate_id_are_refused_at_load() {
        let template = r#"permit (principal == ?principal, action, resource);"#;
        let error = CedarPolicy::from_text(&catalog(), "t.cedar", template).expect_err("template");
        assert!(error.to_string().contains("templates"), "{error}");
        let twice = r#"@id("a") permit (principal, action, resource); @id("a") forbid (principal, action, resource);"#;
        let error = CedarPolicy::from_text(&catalog(), "d.cedar", twice).expect_err("duplicate");
        assert_eq!(
            error.to_string(),
            "policy `a` in d.cedar: another policy has the same id"
        );
    }
}
