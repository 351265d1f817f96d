//! The one table each string enum's names come from ([`string_enum!`](crate::string_enum!)), and the error of a
//! name that is none of them ([`UnknownName`], public as `code::UnknownName`).
//!
//! # String enums
//!
//! Every fieldless enum whose variants travel as strings (results, audit records, stored
//! rows, cards) is declared through [`string_enum!`](crate::string_enum!), with each variant's name written once:
//!
//! ```
//! sallyport_vocab::string_enum! {
//!     /// Where an approval stands.
//!     #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
//!     #[non_exhaustive]
//!     pub enum ApprovalState {
//!         /// Waiting for a human.
//!         Awaiting => "awaiting",
//!         /// A human approved.
//!         Approved => "approved",
//!     }
//! }
//! assert_eq!(ApprovalState::Approved.as_str(), "approved");
//! assert_eq!("awaiting".parse(), Ok(ApprovalState::Awaiting));
//! ```
//!
//! From that table come `ALL`, `as_str`, `parse`, `Display`, `FromStr` (an [`UnknownName`]
//! for any other string) and serde, which writes exactly `as_str` and reads only those names.
//! The enum's attributes (derives, `#[non_exhaustive]`, docs) are passed through; it must be
//! `Copy` and must not derive serde itself.

use std::fmt;
use std::marker::PhantomData;

/// A string that names none of the variants of the string enum it was parsed as (the error
/// of every such enum's `FromStr`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnknownName {
    /// The enum asked for (`RefusalCode`, `Phase`, `Severity`, …).
    pub kind: &'static str,
    /// The string that names none of its variants.
    pub value: String,
    /// The strings that do, in declaration order.
    pub expected: &'static [&'static str],
}

impl UnknownName {
    /// `value`, which names none of `expected`, the names of the enum `kind`.
    pub fn new(
        kind: &'static str,
        value: impl Into<String>,
        expected: &'static [&'static str],
    ) -> Self {
        Self {
            kind,
            value: value.into(),
            expected,
        }
    }
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a {}; expected one of ",
            self.value, self.kind
        )?;
        for (i, name) in self.expected.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "`{name}`")?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownName {}

/// Reads a string enum from its name without copying the string: the `Deserialize` that
/// [`string_enum!`](crate::string_enum!) writes.
pub fn deserialize_name<'de, D, T>(
    deserializer: D,
    kind: &'static str,
    expected: &'static [&'static str],
    parse: fn(&str) -> Option<T>,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Name<T> {
        kind: &'static str,
        expected: &'static [&'static str],
        parse: fn(&str) -> Option<T>,
        out: PhantomData<T>,
    }

    impl<T> serde::de::Visitor<'_> for Name<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a {} name", self.kind)
        }

        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<T, E> {
            (self.parse)(text).ok_or_else(|| E::unknown_variant(text, self.expected))
        }
    }

    deserializer.deserialize_str(Name {
        kind,
        expected,
        parse,
        out: PhantomData,
    })
}

/// Declares a fieldless enum from one `Variant => "name"` table and derives from it
/// `ALL` (every variant, in declaration order), `as_str`, `parse`, `Display`, `FromStr`
/// (error [`UnknownName`]), `Serialize` (exactly `as_str`) and `Deserialize` (only those
/// names; any other is an error listing them).
///
/// ```
/// sallyport_vocab::string_enum! {
///     /// Where an approval stands.
///     #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
///     pub enum ApprovalState {
///         /// Waiting for a human.
///         Awaiting => "awaiting",
///         /// A human approved.
///         Approved => "approved",
///     }
/// }
/// assert_eq!(ApprovalState::ALL, [ApprovalState::Awaiting, ApprovalState::Approved]);
/// assert_eq!(ApprovalState::Approved.to_string(), "approved");
/// assert_eq!(ApprovalState::parse("awaiting"), Some(ApprovalState::Awaiting));
/// let err = "maybe".parse::<ApprovalState>().unwrap_err();
/// assert_eq!(err.to_string(), "`maybe` is not a ApprovalState; expected one of `awaiting`, `approved`");
/// assert_eq!(serde_json::to_string(&ApprovalState::Awaiting).unwrap(), "\"awaiting\"");
/// ```
#[macro_export]
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [Self] = &[ $( Self::$variant, )+ ];

            /// Every variant's name, in declaration order.
            const NAMES: &'static [&'static str] = &[ $( $text, )+ ];

            /// The name of the wire format: in results, audit records, stored rows and
            /// cards, exactly as serde writes it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )+
                }
            }

            /// The variant named `text`, if any.
            pub fn parse(text: &str) -> ::std::option::Option<Self> {
                match text {
                    $( $text => ::std::option::Option::Some(Self::$variant), )+
                    _ => ::std::option::Option::None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::code::UnknownName;

            fn from_str(text: &str) -> ::std::result::Result<Self, Self::Err> {
                Self::parse(text).ok_or_else(|| {
                    $crate::code::UnknownName::new(stringify!($name), text, Self::NAMES)
                })
            }
        }

        impl $crate::__private::serde::Serialize for $name {
            fn serialize<S: $crate::__private::serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> $crate::__private::serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::__private::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::std::result::Result<Self, D::Error> {
                $crate::__private::deserialize_name(
                    deserializer,
                    stringify!($name),
                    Self::NAMES,
                    Self::parse,
                )
            }
        }
    };
}

/// The checks every string enum's test runs (see `tests` below): the names are exactly
/// `expected`, in declaration order, and each one goes through `as_str`, `Display`,
/// `FromStr`, `parse` and serde JSON and back to its variant; another string is refused by
/// `FromStr` (naming the enum and the string) and by serde (listing the names).
pub fn check_string_enum<T>(
    kind: &str,
    all: &[T],
    as_str: fn(T) -> &'static str,
    parse: fn(&str) -> Option<T>,
    expected: &[&str],
) where
    T: Copy + PartialEq + fmt::Debug + fmt::Display + serde::Serialize,
    T: std::str::FromStr<Err = UnknownName> + serde::de::DeserializeOwned,
{
    let names: Vec<&str> = all.iter().map(|v| as_str(*v)).collect();
    assert_eq!(names, expected, "{kind}: the wire names changed");
    for &variant in all {
        let name = as_str(variant);
        assert_eq!(variant.to_string(), name, "{kind}: Display");
        assert_eq!(name.parse::<T>(), Ok(variant), "{kind}: FromStr");
        assert_eq!(parse(name), Some(variant), "{kind}: parse");
        let json = serde_json::to_string(&variant).expect("serialize");
        assert_eq!(json, format!("\"{name}\""), "{kind}: serde");
        let back: T = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, variant, "{kind}: serde back");
    }
    let bad = "no_such_name";
    let err = bad.parse::<T>().expect_err("an unknown name is refused");
    assert_eq!((err.kind, err.value.as_str()), (kind, bad));
    assert_eq!(err.expected, expected);
    let shown = err.to_string();
    assert!(shown.contains(kind) && shown.contains(bad), "{shown}");
    assert_eq!(parse(bad), None);
    let err = serde_json::from_str::<T>(&format!("\"{bad}\"")).expect_err("refused");
    let shown = err.to_string();
    assert!(shown.contains(bad), "{shown}");
    for name in expected {
        assert!(shown.contains(&format!("`{name}`")), "{shown}");
    }
    assert!(
        serde_json::from_str::<T>("1").is_err(),
        "{kind}: only a string names a variant"
    );
}

/// One `#[test]` per string enum, named after it, that runs [`check_string_enum`] on it
/// against the wire names listed (in declaration order). Not public API: the test helper of
/// the crates that declare string enums.
#[doc(hidden)]
#[macro_export]
macro_rules! __string_enum_tests {
    ($( $test:ident: $ty:ident = [$( $name:literal ),+ $(,)?]; )+) => {
        $(
            #[test]
            fn $test() {
                $crate::__private::check_string_enum(
                    stringify!($ty),
                    $ty::ALL,
                    $ty::as_str,
                    $ty::parse,
                    &[$( $name ),+],
                );
            }
        )+
    };
}

#[cfg(test)]
mod tests {
    use crate::action::{ConsentRule, EffectClass, Externality, RetryRule};
    use crate::approval::{ApprovalState, ApprovalStep, ConsentMode, DecisionRefusal, Verdict};
    use crate::drift::{
        CoreDisposition, DivergenceKind, DriftStatus, ReasonCode, RecommendedAction, Severity,
    };
    use crate::journal::Phase;
    use crate::outcome::{Origin, Status};
    use crate::policy::PolicyVerdict;

    // One test per string enum, named after it, pinning its wire names (as they were when
    // each table was written by hand) in declaration order. The code enums' tests are in
    // `code`, with each code's variant beside its string; the enums `sallyport-kernel`
    // declares (HTTP methods, probe classes, chain breaks, …) are tested there.
    crate::__string_enum_tests! {
        effect_class: EffectClass = [
            "observe", "reversible_change", "external_commitment", "irreversible_or_broad",
        ];
        consent_rule: ConsentRule = ["none", "session", "per_call"];
        retry_rule: RetryRule = ["never", "safe", "idempotency_key"];
        externality: Externality = ["internal", "external"];
        phase: Phase = [
            "received", "refused", "intent_written", "dispatched", "finished",
            "cancelled_before_send", "cancelled_unknown", "deferred", "decided",
        ];
        approval_state: ApprovalState = [
            "awaiting", "approved", "denied", "expired", "executing", "finished",
        ];
        verdict: Verdict = ["approve", "deny"];
        policy_verdict: PolicyVerdict = ["allow", "deny", "require_consent"];
        drift_status: DriftStatus = ["clean", "changed", "review_required", "quarantined"];
        core_disposition: CoreDisposition = ["allowed", "denied", "deferred", "error"];
        severity: Severity = ["safe", "low", "medium", "high", "critical"];
        recommended_action: RecommendedAction = [
            "allow", "monitor", "require_review", "approve_new_baseline", "keep_quarantined",
        ];
        reason_code: ReasonCode = [
            "canonicalization_error", "consent_strengthened", "consent_weakened",
            "credential_changed", "data_classes_added", "data_classes_removed",
            "description_changed", "effect_deescalation", "effect_escalation",
            "effective_permission_expansion", "externality_changed", "metadata_confidence_low",
            "provenance_changed", "reconcile_changed", "required_parameters_changed",
            "result_mapping_changed", "retry_changed", "schema_changed", "scope_changed",
            "target_changed", "tool_added", "tool_removed",
        ];
        divergence_kind: DivergenceKind = [
            "constraint_violation", "missing_required", "type_mismatch", "unknown_field",
        ];
        status: Status = [
            "completed", "pending", "already_in_desired_state", "rejected", "unknown",
        ];
        origin: Origin = ["executor", "upstream"];
        consent_mode: ConsentMode = ["blocking", "deferred"];
        approval_step: ApprovalStep = [
            "requested", "approved", "counted", "refused", "denied", "expired", "resumed",
            "remembered", "revoked", "applied_remembered"
        ];
        decision_refusal: DecisionRefusal = ["no_authority", "bad_signature", "self_approval"];
    }
}
