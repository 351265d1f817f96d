//! The action model: the [`Action`] trait and its card, [`ActionSpec`].

use std::borrow::Cow;
use std::fmt;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::target::{HttpMethod, StatusResult, Target};
pub use sallyport_vocab::action::{
    ConsentRule, DataClass, EffectClass, Externality, InstructionMode, RetryRule, ScopedValue,
    SecretMode,
};

/// One narrow operation offered to an agent.
///
/// Implement it with `#[derive(Action)]` (re-exported from this crate); hand-written
/// implementations are possible for actions that need them. The input struct is what the agent
/// fills in: its JSON Schema (from [`JsonSchema`]) is the payload contract and its
/// [`Deserialize`] impl decodes validated arguments.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sallyport action",
    label = "this type does not implement `Action`",
    note = "add `#[derive(Action, Deserialize, JsonSchema)]` and an `#[action(name = …, effect = …)]` attribute to the struct"
)]
pub trait Action: DeserializeOwned + JsonSchema + Send + Sync + 'static {
    /// The action's name, the same as [`ActionSpec::name`] of [`Action::spec`]: a Rust caller
    /// names the action by its type (`GetInvoice::NAME`) and never spells the name again.
    /// `#[derive(Action)]` sets it from `#[action(name = "…")]`. A card renamed through
    /// [`CatalogBuilder::action_with_spec`](crate::catalog::CatalogBuilder::action_with_spec)
    /// is no longer found by this name.
    const NAME: &'static str;

    /// What a `completed` call returns, decoded from
    /// [`ActionResult::data`](crate::outcome::ActionResult::data) by [`Executor::run`](crate::Executor::run).
    ///
    /// `#[derive(Action)]` sets it from the channel target: the `result = T` of an `#[http]`
    /// action (`()` for `result = ()`), [`CommandOutput`](crate::target::CommandOutput) for an
    /// `#[ssh]` action, and [`serde_json::Value`] for a custom channel or none.
    type Output: DeserializeOwned + Send + 'static;

    /// The action card: everything about the action except its input schema.
    fn spec() -> ActionSpec;

    /// The objects this call names, as `(scope kind, value)` pairs, taken from the fields
    /// tagged `#[scope(kind)]`. The executor checks each against the session's scope.
    fn scope_values(&self) -> Vec<ScopedValue> {
        Vec::new()
    }

    /// The free-text audit note (the field tagged `#[audit_note]`), stored and shown to the
    /// human, never parsed.
    fn audit_note(&self) -> Option<String> {
        None
    }
}

/// One field tagged with a scope kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ScopeTag {
    /// The input field's name (as the agent spells it).
    pub field: Cow<'static, str>,
    /// The scope kind (`project`, `workspace`, `host`, …).
    pub kind: Cow<'static, str>,
}

/// The action card: the contract of one action, written once by its author.
///
/// Build one with [`ActionSpec::new`] and the `with_*` setters, or let `#[derive(Action)]` do
/// it. Consent and retry default from the effect class (see [`EffectClass::default_consent`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ActionSpec {
    /// Lowercase snake-case name, at most 64 characters.
    pub name: Cow<'static, str>,
    /// One line: what the action does.
    pub summary: Cow<'static, str>,
    /// The full description shown to the agent (the struct's doc comment).
    pub description: Cow<'static, str>,
    /// The effect class.
    pub effect: EffectClass,
    /// The consent rule.
    pub consent: ConsentRule,
    /// The retry rule.
    pub retry: RetryRule,
    /// The author declares the operation naturally idempotent: repeating a call with the
    /// same arguments adds nothing (a `PUT` of a whole state, "set the status to X"). Only
    /// this, or `observe`, makes the tool exports say `idempotentHint: true`. It never allows
    /// the channel a resend after a request left: that is the retry rule's job.
    pub naturally_idempotent: bool,
    /// Data classes the action reads or returns.
    pub data_classes: Vec<DataClass>,
    /// Whether the effect is visible outside the organisation.
    pub externality: Externality,
    /// Input fields that name objects, with their scope kinds.
    pub scope_tags: Vec<ScopeTag>,
    /// The read-only action that tells whether an uncertain call took effect.
    pub reconcile: Option<Cow<'static, str>>,
    /// The vault credential the channel attaches, by name.
    pub credential: Option<Cow<'static, str>>,
    /// The input field holding the agent's audit note (free text, stored and shown to the
    /// human, never parsed). Channels do not send it upstream unless they are told to.
    pub audit_note_field: Option<Cow<'static, str>>,
    /// Input fields the host's policy sees (`#[policy]`), by the name the agent sends. Not
    /// part of the canonical definition: it changes what the host's [`Policy`] reads, not
    /// what is sent, and a Cedar policy that reads a field no longer visible fails schema
    /// validation when it is loaded.
    ///
    /// [`Policy`]: crate::policy::Policy
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policy_fields: Vec<Cow<'static, str>>,
    /// A sentence for the card's `Scope:` line.
    pub scope_text: Option<Cow<'static, str>>,
    /// A sentence for the card's `Result:` line.
    pub result_text: Option<Cow<'static, str>>,
    /// The author's reviewed reason why an `observe` action uses a method meant to change
    /// state (a search sent as `POST`, say). Without it [`ActionSpec::check`] (and
    /// `#[derive(Action)]`, at compile time) refuses the contradiction. Shown on the card and
    /// part of the canonical definition, so changing it is drift.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method_override: Option<Cow<'static, str>>,
    /// What happens to a credential-shaped value the vault does not know in an answer
    /// (`#[action(secrets = …)]`; see [`crate::inspect`]). Shown on the card and part of the
    /// canonical definition when it is not the default, `mask`.
    #[serde(skip_serializing_if = "is_default")]
    pub secrets: SecretMode,
    /// What happens to text shaped like instructions to the model in an answer
    /// (`#[action(instructions = …)]`; see [`crate::inspect`]). Shown on the card and part of
    /// the canonical definition when it is not the default, `flag`.
    #[serde(skip_serializing_if = "is_default")]
    pub instructions: InstructionMode,
    /// The result fields that hold personal data, and what the agent gets of each
    /// (`#[derive(Sensitive)]` on the result type; see [`crate::sensitive`]). Listed on the
    /// card and part of the canonical definition when there are any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sensitive: Vec<crate::sensitive::SensitiveField>,
    /// The kinds of personal data masked wherever they are found in the answer: its data, its
    /// reason, an SSH command's output (`#[action(personal_data = [email, card])]`; see
    /// [`crate::sensitive`]). Listed on the card and part of the canonical definition when
    /// there are any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub personal_data: Vec<crate::sensitive::PersonalKind>,
    /// Where and how the call is sent.
    pub target: Target,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

impl ActionSpec {
    /// A card with defaults derived from `effect`.
    pub fn new(name: impl Into<Cow<'static, str>>, effect: EffectClass) -> Self {
        Self {
            name: name.into(),
            summary: Cow::Borrowed(""),
            description: Cow::Borrowed(""),
            effect,
            consent: effect.default_consent(),
            retry: effect.default_retry(),
            naturally_idempotent: false,
            data_classes: Vec::new(),
            externality: if matches!(effect, EffectClass::ExternalCommitment) {
                Externality::External
            } else {
                Externality::Internal
            },
            scope_tags: Vec::new(),
            reconcile: None,
            credential: None,
            audit_note_field: None,
            policy_fields: Vec::new(),
            scope_text: None,
            result_text: None,
            method_override: None,
            secrets: SecretMode::Mask,
            instructions: InstructionMode::Flag,
            sensitive: Vec::new(),
            personal_data: Vec::new(),
            target: Target::None,
        }
    }

    /// Sets the description; its first sentence or line becomes the summary unless one is set.
    #[must_use]
    pub fn with_description(mut self, description: impl Into<Cow<'static, str>>) -> Self {
        self.description = description.into();
        if self.summary.is_empty() {
            self.summary = Cow::Owned(first_sentence(&self.description));
        }
        self
    }

    /// Sets the one-line summary.
    #[must_use]
    pub fn with_summary(mut self, summary: impl Into<Cow<'static, str>>) -> Self {
        self.summary = summary.into();
        self
    }

    /// Sets the consent rule. [`ActionSpec::check`] refuses a rule below the effect's floor.
    #[must_use]
    pub fn with_consent(mut self, consent: ConsentRule) -> Self {
        self.consent = consent;
        self
    }

    /// Sets the retry rule.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryRule) -> Self {
        self.retry = retry;
        self
    }

    /// Declares the operation naturally idempotent: a repeated call with the same arguments
    /// adds nothing (see [`ActionSpec::naturally_idempotent`]). An executor idempotency key is
    /// per attempt, so `retry = idempotency_key` alone does not make an action idempotent
    /// for the agent: two identical calls are two attempts with two keys.
    #[must_use]
    pub fn with_naturally_idempotent(mut self) -> Self {
        self.naturally_idempotent = true;
        self
    }

    /// Whether a repeated call with the same arguments adds nothing: every `observe` action,
    /// and an action its author declared naturally idempotent.
    pub fn is_idempotent(&self) -> bool {
        self.effect == EffectClass::Observe || self.naturally_idempotent
    }

    /// Adds a data class.
    #[must_use]
    pub fn with_data_class(mut self, class: DataClass) -> Self {
        if !self.data_classes.contains(&class) {
            self.data_classes.push(class);
        }
        self
    }

    /// Sets the externality.
    #[must_use]
    pub fn with_externality(mut self, externality: Externality) -> Self {
        self.externality = externality;
        self
    }

    /// Tags an input field with a scope kind.
    #[must_use]
    pub fn with_scope_tag(
        mut self,
        field: impl Into<Cow<'static, str>>,
        kind: impl Into<Cow<'static, str>>,
    ) -> Self {
        self.scope_tags.push(ScopeTag {
            field: field.into(),
            kind: kind.into(),
        });
        self
    }

    /// Names the read-only reconcile action.
    #[must_use]
    pub fn with_reconcile(mut self, action: impl Into<Cow<'static, str>>) -> Self {
        self.reconcile = Some(action.into());
        self
    }

    /// Binds a vault credential by name.
    #[must_use]
    pub fn with_credential(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.credential = Some(name.into());
        self
    }

    /// Names the audit-note field.
    #[must_use]
    pub fn with_audit_note_field(mut self, field: impl Into<Cow<'static, str>>) -> Self {
        self.audit_note_field = Some(field.into());
        self
    }

    /// Shows input field `field` (as the agent spells it) to the host's policy.
    #[must_use]
    pub fn with_policy_field(mut self, field: impl Into<Cow<'static, str>>) -> Self {
        let field = field.into();
        if !self.policy_fields.contains(&field) {
            self.policy_fields.push(field);
        }
        self
    }

    /// Sets the card's `Scope:` sentence.
    #[must_use]
    pub fn with_scope_text(mut self, text: impl Into<Cow<'static, str>>) -> Self {
        self.scope_text = Some(text.into());
        self
    }

    /// Sets the card's `Result:` sentence.
    #[must_use]
    pub fn with_result_text(mut self, text: impl Into<Cow<'static, str>>) -> Self {
        self.result_text = Some(text.into());
        self
    }

    /// Gives the reviewed reason why this `observe` action uses a method meant to change
    /// state (see [`ActionSpec::method_override`]).
    #[must_use]
    pub fn with_method_override(mut self, reason: impl Into<Cow<'static, str>>) -> Self {
        self.method_override = Some(reason.into());
        self
    }

    /// The HTTP method that contradicts this action's `observe` effect class: a method
    /// meant to change state on an `observe` action. `None` for any other action.
    pub fn contradicting_method(&self) -> Option<HttpMethod> {
        match &self.target {
            Target::Http(http)
                if self.effect == EffectClass::Observe && http.method.changes_state() =>
            {
                Some(http.method)
            }
            _ => None,
        }
    }

    /// Sets what happens to a credential-shaped value in an answer (see
    /// [`ActionSpec::secrets`]).
    #[must_use]
    pub fn with_secrets(mut self, mode: SecretMode) -> Self {
        self.secrets = mode;
        self
    }

    /// Sets what happens to instruction-shaped text in an answer (see
    /// [`ActionSpec::instructions`]).
    #[must_use]
    pub fn with_instructions(mut self, mode: InstructionMode) -> Self {
        self.instructions = mode;
        self
    }

    /// Sets the result fields that hold personal data (see [`ActionSpec::sensitive`]);
    /// `#[derive(Action)]` reads them from the result type's `#[derive(Sensitive)]`.
    #[must_use]
    pub fn with_sensitive(mut self, fields: Vec<crate::sensitive::SensitiveField>) -> Self {
        self.sensitive = fields;
        self
    }

    /// Sets the kinds of personal data masked wherever they are found in the answer (see
    /// [`ActionSpec::personal_data`]).
    #[must_use]
    pub fn with_personal_data(mut self, kinds: &[crate::sensitive::PersonalKind]) -> Self {
        self.personal_data = kinds.to_vec();
        self
    }

    /// Sets where and how the call is sent.
    #[must_use]
    pub fn with_target(mut self, target: Target) -> Self {
        self.target = target;
        self
    }

    /// Checks the rules `#[derive(Action)]` enforces at compile time, for hand-written cards.
    ///
    /// # Errors
    ///
    /// A [`SpecError`] naming the first broken rule.
    pub fn check(&self) -> Result<(), SpecError> {
        if !is_valid_action_name(&self.name) {
            return Err(SpecError::InvalidName(self.name.to_string()));
        }
        if self.consent < self.effect.consent_floor() {
            return Err(SpecError::ConsentBelowFloor {
                effect: self.effect,
                consent: self.consent,
            });
        }
        if self.retry == RetryRule::Safe && self.effect != EffectClass::Observe {
            return Err(SpecError::SafeRetryOnMutation(self.effect));
        }
        if let Target::Http(http) = &self.target
            && let Err(reason) = http.check_path()
        {
            return Err(SpecError::InvalidHttpPath {
                path: http.path.to_string(),
                reason,
            });
        }
        if let Target::Http(http) = &self.target
            && let Err((code, reason)) = http.check_status_results()
        {
            return Err(SpecError::InvalidStatusResult { code, reason });
        }
        if let Some(reason) = &self.method_override
            && reason.trim().is_empty()
        {
            return Err(SpecError::EmptyMethodOverride);
        }
        if let Some(method) = self.contradicting_method()
            && self.method_override.is_none()
        {
            return Err(SpecError::MethodContradictsEffect(method));
        }
        let undetectable = self.personal_data.iter().chain(
            self.sensitive
                .iter()
                .filter(|f| f.handling == crate::sensitive::Handling::Detect)
                .flat_map(|f| &f.kinds),
        );
        if let Some(kind) = undetectable.copied().find(|k| !k.detectable()) {
            return Err(SpecError::UndetectablePersonalData(kind));
        }
        Ok(())
    }

    /// Renders the card as text for a human or a prompt.
    pub fn card(&self) -> String {
        let mut out = String::new();
        let summary = if self.summary.is_empty() {
            "(no description)"
        } else {
            &self.summary
        };
        let scope = match &self.scope_text {
            Some(text) => text.to_string(),
            None if self.scope_tags.is_empty() => "No scoped objects.".to_owned(),
            None => {
                let kinds: Vec<String> = self
                    .scope_tags
                    .iter()
                    .map(|t| format!("one {} (`{}`)", t.kind, t.field))
                    .collect();
                format!("{}.", capitalize(&kinds.join(", ")))
            }
        };
        let result = self
            .result_text
            .as_deref()
            .unwrap_or("The upstream's answer, projected to declared fields.");
        let consent = match self.consent {
            ConsentRule::None => "Not required.",
            ConsentRule::Session => "Required once per session for this definition.",
            ConsentRule::PerCall => "Required for every call.",
        };
        let retry = match self.retry {
            RetryRule::Never => "Never retry automatically unless the request provably never left.",
            RetryRule::Safe => "Safe to retry: the action only reads.",
            RetryRule::IdempotencyKey => {
                "Never retry automatically unless the server accepts the same idempotency token."
            }
        };
        out.push_str(&format!("Action: {}\n", self.name));
        out.push_str(&format!("Effect: {summary}\n"));
        out.push_str(&format!(
            "Class: {} ({})\n",
            self.effect,
            self.externality.as_str()
        ));
        out.push_str(&format!("Scope: {scope}\n"));
        out.push_str(&format!("Result: {result}\n"));
        out.push_str(&format!("Human consent: {consent}\n"));
        out.push_str(&format!("Retry: {retry}\n"));
        if !self.data_classes.is_empty() {
            let classes: Vec<&str> = self.data_classes.iter().map(DataClass::as_str).collect();
            out.push_str(&format!("Data: {}\n", classes.join(", ")));
        }
        if !self.policy_fields.is_empty() {
            let fields: Vec<&str> = self.policy_fields.iter().map(AsRef::as_ref).collect();
            out.push_str(&format!("Policy sees: {}\n", fields.join(", ")));
        }
        if self.naturally_idempotent {
            out.push_str(
                "Idempotent: repeating a call with the same arguments changes nothing more.\n",
            );
        }
        if let Some(reconcile) = &self.reconcile {
            out.push_str(&format!("If uncertain: check with {reconcile}\n"));
        }
        match self.secrets {
            SecretMode::Mask => {}
            SecretMode::Allow => out.push_str(
                "Secrets: allowed (reviewed opt-out): credential-shaped values in answers reach the agent unmasked.\n",
            ),
            SecretMode::Refuse => out.push_str(
                "Secrets: an answer carrying a credential-shaped value is withheld.\n",
            ),
        }
        match self.instructions {
            InstructionMode::Flag => {}
            InstructionMode::Strip => out.push_str(
                "Instructions: invisible characters are removed from answers; instruction-shaped text is flagged.\n",
            ),
            InstructionMode::Refuse => out.push_str(
                "Instructions: an answer carrying instruction-shaped text is withheld.\n",
            ),
        }
        if !self.sensitive.is_empty() {
            let fields: Vec<String> = self.sensitive.iter().map(|f| f.describe()).collect();
            out.push_str(&format!("Personal data: {}.\n", fields.join("; ")));
        }
        if !self.personal_data.is_empty() {
            let kinds: Vec<&str> = self.personal_data.iter().map(|k| k.as_str()).collect();
            out.push_str(&format!(
                "Personal data in every text: {} found and masked.\n",
                kinds.join(", ")
            ));
        }
        if let Target::Http(http) = &self.target {
            let answers: Vec<String> = http
                .statuses
                .iter()
                .filter_map(|rule| {
                    let data = match &rule.result {
                        StatusResult::Body => return None,
                        StatusResult::Empty => "no data".to_owned(),
                        StatusResult::Value(value) => format!("`{value}`"),
                    };
                    Some(format!(
                        "HTTP {} means {} with {data}",
                        rule.code, rule.status
                    ))
                })
                .collect();
            if !answers.is_empty() {
                out.push_str(&format!("Answers: {}.\n", answers.join("; ")));
            }
        }
        if let Some(reason) = &self.method_override {
            let method = match &self.target {
                Target::Http(http) => http.method.as_str(),
                _ => "its method",
            };
            out.push_str(&format!(
                "Method override: {method}, declared observe: {reason}\n"
            ));
        }
        out
    }
}

impl fmt::Display for ActionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.card())
    }
}

/// A rule of the action model that a card breaks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The name is not lowercase snake case of at most 64 characters.
    #[error("invalid action name `{0}`: use lowercase snake case, at most 64 characters")]
    InvalidName(String),
    /// The consent rule is weaker than the effect class allows.
    #[error("consent `{consent}` is below the floor for `{effect}` actions (per_call)")]
    ConsentBelowFloor {
        /// The effect class.
        effect: EffectClass,
        /// The rule the author chose.
        consent: ConsentRule,
    },
    /// `retry = safe` on an action that changes state.
    #[error("`retry = safe` is only for observe actions, not `{0}`")]
    SafeRetryOnMutation(EffectClass),
    /// The HTTP path template would leave the path it names (a `.` or `..` segment, plain or
    /// percent-encoded, a backslash or a control character).
    #[error("HTTP path template `{path}` is refused: {reason}")]
    InvalidHttpPath {
        /// The template.
        path: String,
        /// Why.
        reason: String,
    },
    /// A status rule's constant result (`empty`, or a value) that the declared result type
    /// cannot read, or that cannot stand for the status it is declared on.
    #[error("the result declared for HTTP {code} is refused: {reason}")]
    InvalidStatusResult {
        /// The HTTP status code.
        code: u16,
        /// Why.
        reason: String,
    },
    /// An `observe` action on a method meant to change state, without a reviewed reason.
    #[error(
        "an `observe` action uses {0}, a method meant to change state; give the reviewed reason \
         it only reads with `with_method_override` (`method_override = \"…\"` in \
         `#[action]`), or declare the effect it has"
    )]
    MethodContradictsEffect(HttpMethod),
    /// Detection asked for a kind of personal data that cannot be told from other text.
    #[error(
        "`{0}` cannot be detected in free text: declare the result field that holds it \
         (`#[sensitive({0})]`) instead"
    )]
    UndetectablePersonalData(crate::sensitive::PersonalKind),
    /// A method override without a reason.
    #[error("a method override needs its reason: say why this action only reads")]
    EmptyMethodOverride,
}

/// Whether `name` is a valid action name: lowercase snake case, starting with a letter, at
/// most 64 characters.
pub fn is_valid_action_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.ends_with('_')
        && !name.contains("__")
}

fn first_sentence(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let line = line.trim();
    match line.find(". ") {
        Some(i) => line[..=i].to_owned(),
        None => line.to_owned(),
    }
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_renders_the_documented_form() {
        let spec = ActionSpec::new("promote_preview_build", EffectClass::ExternalCommitment)
            .with_description("Changes one named preview build into the staging release channel.")
            .with_scope_text("One project and one build ID.")
            .with_result_text("Release ID, resulting channel, and server timestamp.")
            .with_retry(RetryRule::IdempotencyKey);
        let card = spec.card();
        let expected_head = "Action: promote_preview_build\n\
Effect: Changes one named preview build into the staging release channel.\n";
        assert!(card.starts_with(expected_head), "{card}");
        assert!(card.contains("Scope: One project and one build ID.\n"));
        assert!(card.contains("Result: Release ID, resulting channel, and server timestamp.\n"));
        assert!(card.contains("Human consent: Required for every call.\n"));
        assert!(card.contains(
            "Retry: Never retry automatically unless the server accepts the same idempotency token.\n"
        ));
    }

    #[test]
    fn an_observe_action_on_a_changing_method_needs_a_reviewed_override_shown_on_the_card() {
        use crate::target::HttpTarget;
        let search = ActionSpec::new("search_issues", EffectClass::Observe)
            .with_target(Target::Http(HttpTarget::new(HttpMethod::Post, "/search")));
        assert_eq!(search.contradicting_method(), Some(HttpMethod::Post));
        assert_eq!(
            search.check(),
            Err(SpecError::MethodContradictsEffect(HttpMethod::Post))
        );
        assert_eq!(
            search.check().unwrap_err().to_string(),
            "an `observe` action uses POST, a method meant to change state; give the reviewed \
             reason it only reads with `with_method_override` (`method_override = \"…\"` in \
             `#[action]`), or declare the effect it has"
        );
        assert_eq!(
            search.clone().with_method_override("  ").check(),
            Err(SpecError::EmptyMethodOverride)
        );
        let reviewed = search.with_method_override("the search endpoint takes its query as a body");
        assert_eq!(reviewed.check(), Ok(()));
        assert!(
            reviewed.card().ends_with(
                "Method override: POST, declared observe: the search endpoint takes its query as \
                 a body\n"
            ),
            "{}",
            reviewed.card()
        );
        let read = ActionSpec::new("get_issue", EffectClass::Observe)
            .with_target(Target::Http(HttpTarget::new(HttpMethod::Get, "/issue")));
        assert_eq!(read.contradicting_method(), None);
        assert!(!read.card().contains("Method override"), "{}", read.card());
    }

    #[test]
    fn status_results_are_checked_against_the_result_type_and_shown_on_the_card() {
        use crate::target::{HttpTarget, ResultShape, StatusResult};
        #[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
        struct Merged {
            merged: bool,
        }
        let target = HttpTarget::new(HttpMethod::Get, "/pulls/{n}/merge")
            .with_status_result(
                204,
                crate::outcome::Status::Completed,
                StatusResult::Value(serde_json::json!({"merged": true})),
            )
            .with_status_result(
                404,
                crate::outcome::Status::Completed,
                StatusResult::Value(serde_json::json!({"merged": false})),
            )
            .with_result(ResultShape::of::<Merged>());
        let spec = ActionSpec::new("check_if_merged", EffectClass::Observe)
            .with_target(Target::Http(target));
        assert_eq!(spec.check(), Ok(()));
        assert!(
            spec.card().contains(
                "Answers: HTTP 204 means completed with `{\"merged\":true}`; HTTP 404 means \
                 completed with `{\"merged\":false}`.\n"
            ),
            "{}",
            spec.card()
        );
        let needs_body =
            ActionSpec::new("dispatch", EffectClass::ReversibleChange).with_target(Target::Http(
                HttpTarget::new(HttpMethod::Post, "/dispatches")
                    .with_status_result(204, crate::outcome::Status::Completed, StatusResult::Empty)
                    .with_result(ResultShape::of::<Merged>()),
            ));
        assert_eq!(
            needs_body.check().unwrap_err().to_string(),
            "the result declared for HTTP 204 is refused: the declared result type cannot read \
             null: response does not match the declared result: invalid type: null, expected \
             struct Merged"
        );
        let optional =
            ActionSpec::new("dispatch", EffectClass::ReversibleChange).with_target(Target::Http(
                HttpTarget::new(HttpMethod::Post, "/dispatches")
                    .with_status_result(204, crate::outcome::Status::Completed, StatusResult::Empty)
                    .with_result(ResultShape::of::<Option<Merged>>()),
            ));
        assert_eq!(optional.check(), Ok(()));
        assert!(
            optional
                .card()
                .contains("Answers: HTTP 204 means completed with no data.\n")
        );
        for (code, status, result, reason) in [
            (
                404,
                crate::outcome::Status::Completed,
                StatusResult::Empty,
                "an error code with no data is not an answer; declare the value it means, as in \
                 `completed(value = ...)`",
            ),
            (
                503,
                crate::outcome::Status::Completed,
                StatusResult::Value(serde_json::json!(null)),
                "a server error is never an answer; leave it to the conservative default",
            ),
            (
                409,
                crate::outcome::Status::Rejected,
                StatusResult::Empty,
                "a `rejected` result carries no data; only `completed`, \
                 `already_in_desired_state` and `pending` take `empty` or a value",
            ),
        ] {
            let target =
                HttpTarget::new(HttpMethod::Get, "/x").with_status_result(code, status, result);
            assert_eq!(
                target.check_status_results(),
                Err((code, reason.to_owned()))
            );
        }
        let no_type = HttpTarget::new(HttpMethod::Get, "/x").with_status_result(
            404,
            crate::outcome::Status::Completed,
            StatusResult::Value(serde_json::json!(false)),
        );
        assert_eq!(
            no_type.check_status_results(),
            Err((
                404,
                "the action declares no result type, so the value false would never reach the \
                 agent; declare one that reads it"
                    .to_owned()
            ))
        );
    }

    #[test]
    fn consent_defaults_follow_the_effect_class() {
        assert_eq!(EffectClass::Observe.default_consent(), ConsentRule::None);
        assert_eq!(
            EffectClass::ReversibleChange.default_consent(),
            ConsentRule::Session
        );
        assert_eq!(
            EffectClass::ExternalCommitment.default_consent(),
            ConsentRule::PerCall
        );
        assert_eq!(
            EffectClass::IrreversibleOrBroad.default_consent(),
            ConsentRule::PerCall
        );
    }

    #[test]
    fn check_refuses_weak_consent_safe_retry_and_bad_names() {
        let weak = ActionSpec::new("pay", EffectClass::ExternalCommitment)
            .with_consent(ConsentRule::Session);
        assert!(matches!(
            weak.check(),
            Err(SpecError::ConsentBelowFloor { .. })
        ));
        let retry =
            ActionSpec::new("delete_it", EffectClass::ReversibleChange).with_retry(RetryRule::Safe);
        assert_eq!(
            retry.check(),
            Err(SpecError::SafeRetryOnMutation(
                EffectClass::ReversibleChange
            ))
        );
        for bad in [
            "",
            "Create",
            "create-thing",
            "_x",
            "x_",
            "a__b",
            "9lives",
            &"a".repeat(65),
        ] {
            assert!(!is_valid_action_name(bad), "{bad:?} should be invalid");
        }
        assert!(is_valid_action_name("get_invoice2"));
    }
}
