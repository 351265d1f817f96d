//! The action model's vocabulary: the objects a call names ([`ScopedValue`]), the effect
//! classes, consent and retry rules, externality and data classes an action card declares.
//! The card itself (`ActionSpec`) and the `Action` trait are in `sallyport-kernel`'s `action`
//! module, which re-exports these.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::string_enum;

/// One object named by a call: the scope kind (`project`, `host`, …) and the value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ScopedValue {
    /// The scope kind the field was tagged with.
    pub kind: String,
    /// The field name in the input struct.
    pub field: String,
    /// The identifier the agent supplied.
    pub value: String,
}

impl ScopedValue {
    /// A scoped value named by `field`.
    pub fn new(
        kind: impl Into<String>,
        field: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        Self {
            kind: kind.into(),
            field: field.into(),
            value: value.into(),
        }
    }
}

string_enum! {
    /// What an action does to the world. Never inferred from an HTTP method.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum EffectClass {
        /// A bounded read; no state changes.
        Observe => "observe",
        /// A change with a documented, practical undo.
        ReversibleChange => "reversible_change",
        /// Sends, pays, publishes or changes what customers see.
        ExternalCommitment => "external_commitment",
        /// Permanent deletion, access or permission changes, or many objects at once.
        IrreversibleOrBroad => "irreversible_or_broad",
    }
}

impl EffectClass {
    /// The consent rule an action of this class gets when its author says nothing.
    pub fn default_consent(self) -> ConsentRule {
        match self {
            Self::Observe => ConsentRule::None,
            Self::ReversibleChange => ConsentRule::Session,
            Self::ExternalCommitment | Self::IrreversibleOrBroad => ConsentRule::PerCall,
        }
    }

    /// The weakest consent rule an author may choose for this class.
    pub fn consent_floor(self) -> ConsentRule {
        match self {
            Self::Observe | Self::ReversibleChange => ConsentRule::None,
            Self::ExternalCommitment | Self::IrreversibleOrBroad => ConsentRule::PerCall,
        }
    }

    /// The retry rule an action of this class gets when its author says nothing.
    pub fn default_retry(self) -> RetryRule {
        match self {
            Self::Observe => RetryRule::Safe,
            _ => RetryRule::Never,
        }
    }

    /// Whether the action changes state (anything but `observe`).
    pub fn is_mutating(self) -> bool {
        self != Self::Observe
    }
}

string_enum! {
    /// When a human must approve a call. Ordered from weakest to strongest.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum ConsentRule {
        /// No human approval.
        None => "none",
        /// Approved once per session and action definition, until the grant expires.
        Session => "session",
        /// Approved for every call.
        PerCall => "per_call",
    }
}

string_enum! {
    /// Whether the executor may resend a call.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum RetryRule {
        /// Resend only when the request provably never left.
        Never => "never",
        /// Safe to resend (observe actions only).
        Safe => "safe",
        /// The server honours the executor's idempotency key; resend with the same key and payload.
        IdempotencyKey => "idempotency_key",
    }
}

string_enum! {
    /// Whether an effect is visible outside the organisation.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Externality {
        /// Visible only inside the organisation.
        #[default]
        Internal => "internal",
        /// Visible to customers, partners or the public.
        External => "external",
    }
}

/// Sensitivity of what an action reads or returns (`public`, `internal`, `pii`, `financial`,
/// `credentials`, or an organisation's own class name).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DataClass(Cow<'static, str>);

impl DataClass {
    /// Public data.
    pub const PUBLIC: Self = Self(Cow::Borrowed("public"));
    /// Internal, non-sensitive data.
    pub const INTERNAL: Self = Self(Cow::Borrowed("internal"));
    /// Personal data.
    pub const PII: Self = Self(Cow::Borrowed("pii"));
    /// Financial data.
    pub const FINANCIAL: Self = Self(Cow::Borrowed("financial"));
    /// Credentials or secrets.
    pub const CREDENTIALS: Self = Self(Cow::Borrowed("credentials"));

    /// A data class by name.
    pub fn new(name: impl Into<Cow<'static, str>>) -> Self {
        Self(name.into())
    }

    /// The class name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

string_enum! {
    /// What the executor does when an answer carries a credential-shaped value that the vault
    /// does not know (a token of a common provider, a private-key block, a JWT): the action's
    /// `#[action(secrets = …)]`. Shown on the card and part of the definition when it is not
    /// the default, so loosening it is drift the baseline sees.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum SecretMode {
        /// An explicit, reviewed opt-out for an action whose purpose is to return such a
        /// value: nothing is masked (each hit is still recorded in the audit record).
        Allow => "allow",
        /// The value is replaced by `[MASKED:<rule>]`; the result and the audit record say
        /// which rule matched where, never the value. The default.
        #[default]
        Mask => "mask",
        /// The answer is withheld: the agent gets `rejected` (`secret_in_answer`) and
        /// nothing of the data.
        Refuse => "refuse",
    }
}

string_enum! {
    /// What the executor does when an answer carries instruction-shaped text (role markers,
    /// "ignore previous instructions", tool-call syntax, invisible Unicode tag characters,
    /// bidi overrides): the action's `#[action(instructions = …)]`. Shown on the card and
    /// part of the definition when it is not the default.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum InstructionMode {
        /// The text is left as it is; the result's `findings` and the audit record say
        /// what was seen where. The default.
        #[default]
        Flag => "flag",
        /// The answer is withheld: the agent gets `rejected` (`instructions_in_answer`)
        /// and nothing of the data.
        Refuse => "refuse",
        /// Invisible characters (tag characters, bidi controls, zero-width characters) are
        /// removed; the visible phrases are flagged as with `flag`.
        Strip => "strip",
    }
}
