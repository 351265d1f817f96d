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
