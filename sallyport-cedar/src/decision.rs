//! The decision policy: who may decide which approvals, in Cedar.
//!
//! Principal an `Approver` (its subject the entity id; `name`, `channel` and `groups` as
//! attributes), action `Action::"decide"`, resource the `Approval` (its id; the parked call's
//! `action`, `effect`, `externality`, `objects` as `"kind:value"` strings, `object_kinds`,
//! `data_classes`, `requester` (empty when the host named none) and `required_approvals`),
//! context `{ verdict: "approve" | "deny" }`. A decision is allowed when a `permit` matches and
//! no `forbid` does; a `forbid`'s `@reason("…")` is the text the refused approver reads.
//!
//! ```cedar
//! permit (principal, action == Action::"decide", resource)
//! when { principal.groups.contains("payments") && resource.effect == "external_commitment" };
//! @reason("only the on-call may decide destructive changes")
//! forbid (principal, action == Action::"decide", resource)
//! when { resource.effect == "irreversible_or_broad" && !principal.groups.contains("on-call") };
//! ```

use std::collections::{HashMap, HashSet};
use std::path::Path;

use cedar_policy::{
    Authorizer, Context, Decision, Entities, Entity, EntityId, EntityUid, PolicySet, Request,
    RestrictedExpression, Schema, Validator,
};
use sallyport_core::approval::{Authority, DecisionPolicy, DecisionRequest};
use serde_json::json;

use crate::{CedarError, REASON_ANNOTATION, cedar_message, load, read, type_name};

/// The schema decision policies are validated against, in Cedar's schema syntax.
pub const DECISION_SCHEMA: &str = r#"entity Approver = {
  "name": String,
  "channel": String,
  "groups": Set<String>,
};
entity Approval = {
  "action": String,
  "effect": String,
  "externality": String,
  "objects": Set<String>,
  "object_kinds": Set<String>,
  "data_classes": Set<String>,
  "requester": String,
  "required_approvals": Long,
};
action decide appliesTo {
  principal: [Approver],
  resource: [Approval],
  context: { "verdict": String },
};
"#;

/// A Cedar decision policy: who may decide which approvals.
/// Hand it to `ExecutorBuilder::decision_policy`.
pub struct CedarDecisionPolicy {
    name: String,
    schema: Schema,
    policies: PolicySet,
    authorizer: Authorizer,
}

impl std::fmt::Debug for CedarDecisionPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CedarDecisionPolicy")
            .field("name", &self.name)
            .field("policies", &self.policies.policies().count())
            .finish_non_exhaustive()
    }
}

impl CedarDecisionPolicy {
    /// Decision policies from `text`, validated against [`DECISION_SCHEMA`]; `name` names
    /// them in refusals and errors.
    ///
    /// # Errors
    ///
    /// [`CedarError::Parse`], [`CedarError::Validation`] or [`CedarError::Annotation`].
    pub fn from_text(name: impl Into<String>, text: &str) -> Result<Self, CedarError> {
        let name = name.into();
        let (schema, _) = Schema::from_cedarschema_str(DECISION_SCHEMA)
            .map_err(|e| CedarError::Schema(cedar_message(&e)))?;
        let policies = load(&Validator::new(schema.clone()), &name, text)?;
        Ok(Self {
            name,
            schema,
            policies,
            authorizer: Authorizer::new(),
        })
    }

    /// Decision policies from the file at `path` (named by its file name).
    ///
    /// # Errors
    ///
    /// [`CedarError::Io`], and what [`CedarDecisionPolicy::from_text`] reports.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, CedarError> {
        let path = path.as_ref();
        let text = read(path)?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Self::from_text(name, &text)
    }

    fn evaluate(&self, request: &DecisionRequest<'_>) -> Result<Authority, String> {
        let approval = request.approval;
        let decider = request.decider;
        let strings = |items: Vec<String>| {
            RestrictedExpression::new_set(items.into_iter().map(RestrictedExpression::new_string))
        };
        let principal = EntityUid::from_type_name_and_id(
            type_name("Approver")?,
            EntityId::new(decider.by.as_str()),
        );
        let resource = EntityUid::from_type_name_and_id(
            type_name("Approval")?,
            EntityId::new(approval.approval_id.as_str()),
        );
        let action =
            EntityUid::from_type_name_and_id(type_name("Action")?, EntityId::new("decide"));
        let approver = Entity::new(
            principal.clone(),
            HashMap::from([
                (
                    "name".to_owned(),
                    RestrictedExpression::new_string(decider.name.clone().unwrap_or_default()),
                ),
                (
                    "channel".to_owned(),
                    RestrictedExpression::new_string(decider.channel.clone()),
                ),
                ("groups".to_owned(), strings(decider.groups.clone())),
            ]),
            HashSet::new(),
        )
        .map_err(|e| {
            format!(
                "the approver does not fit the schema: {}",
                cedar_message(&e)
            )
        })?;
        let kinds: Vec<String> = approval.objects.iter().map(|o| o.kind.clone()).collect();
        let objects = approval
            .objects
            .iter()
            .map(|o| format!("{}:{}", o.kind, o.value))
            .collect();
        let parked = Entity::new(
            resource.clone(),
            HashMap::from([
                (
                    "action".to_owned(),
                    RestrictedExpression::new_string(approval.action.clone()),
                ),
                (
                    "effect".to_owned(),
                    RestrictedExpression::new_string(approval.effect.as_str().to_owned()),
                ),
                (
                    "externality".to_owned(),
                    RestrictedExpression::new_string(approval.externality.as_str().to_owned()),
                ),
                ("objects".to_owned(), strings(objects)),
                ("object_kinds".to_owned(), strings(kinds)),
                (
                    "data_classes".to_owned(),
                    strings(
                        approval
                            .data_classes
                            .iter()
                            .map(|c| c.as_str().to_owned())
                            .collect(),
                    ),
                ),
                (
                    "requester".to_owned(),
                    RestrictedExpression::new_string(
                        approval.session.requester().unwrap_or_default().to_owned(),
                    ),
                ),
                (
                    "required_approvals".to_owned(),
                    RestrictedExpression::new_long(i64::from(approval.required_approvals)),
                ),
            ]),
            HashSet::new(),
        )
        .map_err(|e| {
            format!(
                "the approval does not fit the schema: {}",
                cedar_message(&e)
            )
        })?;
        let entities = Entities::from_entities([approver, parked], Some(&self.schema))
            .map_err(|e| format!("the entities do not fit the schema: {}", cedar_message(&e)))?;
        let context = Context::from_json_value(
            json!({ "verdict": request.verdict.as_str() }),
            Some((&self.schema, &action)),
        )
        .map_err(|e| format!("the context does not fit the schema: {}", cedar_message(&e)))?;
        let cedar_request = Request::new(principal, action, resource, context, Some(&self.schema))
            .map_err(|e| format!("the request does not fit the schema: {}", cedar_message(&e)))?;
        let response = self
            .authorizer
            .is_authorized(&cedar_request, &self.policies, &entities);
        if let Some(error) = response.diagnostics().errors().next() {
            return Ok(Authority::Refuse {
                reason: format!(
                    "a decision policy in {} could not be evaluated ({}), so the decision is refused",
                    self.name,
                    cedar_message(error)
                ),
            });
        }
        if response.decision() == Decision::Allow {
            return Ok(Authority::Allow);
        }
        let mut ids: Vec<_> = response.diagnostics().reason().collect();
        ids.sort_by_key(|id| id.to_string());
        let stated = ids
            .iter()
            .find_map(|id| self.policies.annotation(id, REASON_ANNOTATION));
        let reason = match (stated, ids.first()) {
            (Some(text), _) => text.to_owned(),
            (None, Some(id)) => format!("forbidden by decision policy `{id}` in {}", self.name),
            (None, None) => format!(
                "no decision policy in {} permits `{}` to {} approvals of `{}`",
                self.name,
                decider.by,
                request.verdict.as_str(),
                approval.action
            ),
        };
        Ok(Authority::Refuse { reason })
    }
}

impl DecisionPolicy for CedarDecisionPolicy {
    fn authorize(&self, request: &DecisionRequest<'_>) -> Authority {
        self.evaluate(request)
            .unwrap_or_else(|reason| Authority::Refuse {
                reason: format!("{reason}; the decision is refused"),
            })
    }
}

#[cfg(test)]
mod tests {
    use sallyport_core::approval::{Approval, ApprovalId, Decider, Verdict};
    use serde_json::json;

    use super::*;

    /// An awaiting approval of `action` (`effect`), requested by `rita`, naming one project.
    fn approval(action: &str, effect: &str) -> Approval {
        serde_json::from_value(json!({
            "approval_id": ApprovalId::generate(),
            "attempt_id": "att_0193aa",
            "action": action,
            "summary": "A change.",
            "effect": effect,
            "externality": "external",
            "rule": "per_call",
            "session": sallyport_core::Session::new("s1").requested_by("rita"),
            "objects": [{"kind": "project", "field": "project_id", "value": "web"}],
            "request": "POST http://127.0.0.1:9/x",
            "fingerprint": "f".repeat(64),
            "definition_hash": "d".repeat(64),
            "definition_status": "no definition guard configured",
            "arguments": {},
            "created_at_ms": 1_000,
            "expires_at_ms": 2_000,
            "state": "awaiting",
        }))
        .expect("an approval")
    }

    const POLICY: &str = r#"
        @id("ops-decide-deploys")
        permit (principal, action == Action::"decide", resource)
        when { principal.groups.contains("ops") && resource.action == "deploy"
               && resource.objects.contains("project:web") };
        @id("leads-only-for-destructive")
        @reason("only a lead decides destructive changes")
        forbid (principal, action == Action::"decide", resource)
        when { resource.effect == "irreversible_or_broad" && !principal.groups.contains("lead") };
        @id("anyone-may-deny-reads")
        permit (principal, action == Action::"decide", resource)
        when { context.verdict == "deny" && resource.effect == "observe" };
    "#;

    fn authorize(policy: &CedarDecisionPolicy, a: &Approval, d: &Decider, v: Verdict) -> Authority {
        policy.authorize(&DecisionRequest::new(a, d, v))
    }

    #[test]
    fn groups_action_objects_and_effect_decide_who_may_decide() {
        let policy = CedarDecisionPolicy::from_text("decide.cedar", POLICY).expect("loads");
        let deploy = approval("deploy", "external_commitment");
        let ops = Decider::new("u1", "cli").with_groups(["ops"]);
        let sales = Decider::new("u2", "webhook").with_groups(["sales"]);
        assert_eq!(
            authorize(&policy, &deploy, &ops, Verdict::Approve),
            Authority::Allow
        );
        assert_eq!(
            authorize(&policy, &deploy, &sales, Verdict::Approve),
            Authority::Refuse {
                reason: "no decision policy in decide.cedar permits `u2` to approve approvals of `deploy`"
                    .to_owned()
            }
        );
        let destroy = approval("deploy", "irreversible_or_broad");
        assert_eq!(
            authorize(&policy, &destroy, &ops, Verdict::Approve),
            Authority::Refuse {
                reason: "only a lead decides destructive changes".to_owned()
            }
        );
        let lead = Decider::new("u3", "console").with_groups(["ops", "lead"]);
        assert_eq!(
            authorize(&policy, &destroy, &lead, Verdict::Approve),
            Authority::Allow
        );
        // The verdict is in the context.
        let read = approval("list", "observe");
        assert_eq!(
            authorize(&policy, &read, &sales, Verdict::Deny),
            Authority::Allow
        );
        assert!(matches!(
            authorize(&policy, &read, &sales, Verdict::Approve),
            Authority::Refuse { .. }
        ));
    }

    #[test]
    fn a_policy_naming_what_the_schema_lacks_is_refused_at_load() {
        let unknown = r#"permit (principal, action == Action::"decide", resource) when { principal.team == "x" };"#;
        let error = CedarDecisionPolicy::from_text("bad.cedar", unknown).expect_err("refused");
        assert!(matches!(error, CedarError::Validation { .. }), "{error}");
        let parse = CedarDecisionPolicy::from_text("bad.cedar", "permit (").expect_err("refused");
        assert!(matches!(parse, CedarError::Parse { .. }), "{parse}");
        assert!(
            format!(
                "{:?}",
                CedarDecisionPolicy::from_text("ok", POLICY).expect("ok")
            )
            .contains("policies: 3")
        );
    }
}
