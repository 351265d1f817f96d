//! Items the derive macro's generated code names. Not public API.

pub use std::borrow::Cow;
pub use std::option::Option;
pub use std::string::String;
pub use std::vec::Vec;

pub use schemars;
pub use serde_json;

// The supertraits of `Action`, named by the stub impl the derive emits when it fails.
pub use schemars::JsonSchema;
pub use serde::de::DeserializeOwned;

pub use crate::action::{
    Action, ActionSpec, ConsentRule, DataClass, EffectClass, Externality, InstructionMode,
    RetryRule, ScopedValue, SecretMode,
};
pub use crate::outcome::Status;
pub use crate::target::{
    CommandOutput, HttpMethod, HttpTarget, ResultShape, SshTarget, StatusResult, Target,
};

/// A status rule's constant result, `status(404) = completed(value = "…")`, from the JSON
/// text the derive parsed at compile time.
pub fn status_value(json: &str) -> StatusResult {
    #[allow(
        clippy::expect_used,
        reason = "the derive refuses the attribute unless this text parses as JSON, with this \
                  same serde_json"
    )]
    let value = serde_json::from_str(json).expect("JSON checked by #[derive(Action)]");
    StatusResult::Value(value)
}

/// A duration the derive checked at compile time, in milliseconds.
pub const fn millis(ms: u64) -> std::time::Duration {
    std::time::Duration::from_millis(ms)
}

/// A field type that can name an object in a scope (an identifier).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot hold an identifier, so the field cannot carry a scope tag",
    label = "scope tags go on identifier fields",
    note = "use `String`, `&str`, an integer, `uuid`-like string ids, or an `Option`/`Vec` of them"
)]
pub trait ScopeValue {
    /// Appends the identifiers this value names.
    fn push_scope_values(&self, out: &mut Vec<String>);
}

impl ScopeValue for String {
    fn push_scope_values(&self, out: &mut Vec<String>) {
        out.push(self.clone());
    }
}

impl ScopeValue for str {
    fn push_scope_values(&self, out: &mut Vec<String>) {
        out.push(self.to_owned());
    }
}

impl ScopeValue for Cow<'_, str> {
    fn push_scope_values(&self, out: &mut Vec<String>) {
        out.push(self.to_string());
    }
}

impl<T: ScopeValue + ?Sized> ScopeValue for &T {
    fn push_scope_values(&self, out: &mut Vec<String>) {
        (**self).push_scope_values(out);
    }
}

impl<T: ScopeValue> ScopeValue for Option<T> {
    fn push_scope_values(&self, out: &mut Vec<String>) {
        if let Some(v) = self {
            v.push_scope_values(out);
        }
    }
}

impl<T: ScopeValue> ScopeValue for Vec<T> {
    fn push_scope_values(&self, out: &mut Vec<String>) {
        for v in self {
            v.push_scope_values(out);
        }
    }
}

macro_rules! int_scope_value {
    ($($t:ty),*) => {$(
        impl ScopeValue for $t {
            fn push_scope_values(&self, out: &mut Vec<String>) {
                out.push(self.to_string());
            }
        }
    )*};
}
int_scope_value!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize
);

/// Collects the scoped values of one field.
pub fn scope_values_of<T: ScopeValue + ?Sized>(
    kind: &'static str,
    field: &'static str,
    value: &T,
    out: &mut Vec<ScopedValue>,
) {
    let mut ids = Vec::new();
    value.push_scope_values(&mut ids);
    out.extend(ids.into_iter().map(|id| ScopedValue::new(kind, field, id)));
}

/// A field type that can hold an audit note (free text).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot hold an audit note",
    label = "`#[audit_note]` goes on a `String` or `Option<String>` field",
    note = "the audit note is free text that is stored and shown to the human, never parsed"
)]
pub trait AuditNoteValue {
    /// The note, if any.
    fn audit_note(&self) -> Option<String>;
}

impl AuditNoteValue for String {
    fn audit_note(&self) -> Option<String> {
        Some(self.clone())
    }
}

impl AuditNoteValue for Option<String> {
    fn audit_note(&self) -> Option<String> {
        self.clone()
    }
}

/// Projection helper: the declared result type of an HTTP action.
pub fn result_shape<T>() -> ResultShape
where
    T: serde::de::DeserializeOwned + serde::Serialize + schemars::JsonSchema,
{
    ResultShape::of::<T>()
}

pub use crate::sensitive::{Handling, PersonalKind, Sensitive, SensitiveField};

/// How `#[derive(Action)]` and `#[derive(Sensitive)]` read a type's personal-data
/// declarations when it may have none: `(&SensitiveProbe::<T>::new()).sensitive_fields()`
/// calls [`Sensitive::sensitive_fields`] when `T` implements it (method lookup tries
/// `SensitiveDeclared`'s receiver first) and gives an empty list otherwise.
#[derive(Debug)]
pub struct SensitiveProbe<T: ?Sized>(std::marker::PhantomData<T>);

impl<T: ?Sized> SensitiveProbe<T> {
    /// A probe for `T`.
    #[allow(clippy::new_without_default, reason = "named only by generated code")]
    pub const fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

/// The probe's answer for a type that declares personal data.
pub trait SensitiveDeclared {
    /// The type's declarations.
    fn sensitive_fields(&self) -> Vec<SensitiveField>;
}

impl<T: Sensitive> SensitiveDeclared for SensitiveProbe<T> {
    fn sensitive_fields(&self) -> Vec<SensitiveField> {
        T::sensitive_fields()
    }
}

/// The probe's answer for any other type: none.
pub trait SensitiveNone {
    /// No declarations.
    fn sensitive_fields(&self) -> Vec<SensitiveField>;
}

impl<T: ?Sized> SensitiveNone for &SensitiveProbe<T> {
    fn sensitive_fields(&self) -> Vec<SensitiveField> {
        Vec::new()
    }
}
