//! The parsed input as plain data: what each attribute and field says, with the author's
//! tokens kept for spans.

use proc_macro2::Span;
use syn::{Attribute, Error, Ident, LitInt, LitStr, Type};

use super::keyword::{Consent, Effect, Externality, Instructions, Method, Retry, Secrets, Status};

/// A keyword as the author wrote it.
pub(crate) struct Kw<K> {
    pub(crate) value: K,
    pub(crate) ident: Ident,
}

/// One key of an attribute: whether the author wrote it, and its value if that parsed.
pub(crate) struct Setting<T> {
    pub(crate) key: Option<Ident>,
    pub(crate) value: Option<T>,
}

impl<T> Default for Setting<T> {
    fn default() -> Self {
        Self {
            key: None,
            value: None,
        }
    }
}

impl<T> Setting<T> {
    /// Records `key = value`; a second `key` is an error, as is a value that did not parse.
    pub(super) fn set(&mut self, key: Ident, attr: &str, value: syn::Result<T>) -> syn::Result<()> {
        if self.key.is_some() {
            return Err(Error::new(
                key.span(),
                format!("duplicate key `{key}` in #[{attr}]; it is already set above"),
            ));
        }
        self.key = Some(key);
        self.value = Some(value?);
        Ok(())
    }

    /// The value, if the author wrote one that parsed.
    pub(crate) fn get(&self) -> Option<&T> {
        self.value.as_ref()
    }
}

/// The struct's doc comment: the description and its one-line summary.
pub(crate) struct Doc {
    pub(crate) text: String,
    pub(crate) summary: String,
}

/// `#[action(...)]`, merged over every such attribute.
#[derive(Default)]
pub(crate) struct ActionAttr {
    /// The first `#[action]` attribute, for spans.
    pub(crate) attr: Option<Attribute>,
    pub(crate) name: Setting<LitStr>,
    pub(crate) effect: Setting<Kw<Effect>>,
    pub(crate) consent: Setting<Kw<Consent>>,
    pub(crate) retry: Setting<Kw<Retry>>,
    pub(crate) reconcile: Setting<LitStr>,
    pub(crate) credential: Setting<LitStr>,
    pub(crate) data: Setting<Vec<Ident>>,
    pub(crate) externality: Setting<Kw<Externality>>,
    /// `secrets = mask | refuse | allow`.
    pub(crate) secrets: Setting<Kw<Secrets>>,
    /// `instructions = flag | strip | refuse`.
    pub(crate) instructions: Setting<Kw<Instructions>>,
    /// `personal_data = [email, card]`: kinds found and masked in every text of the answer.
    pub(crate) personal_data: Setting<Vec<Ident>>,
    pub(crate) scope: Setting<LitStr>,
    pub(crate) returns: Setting<LitStr>,
    pub(crate) summary: Setting<LitStr>,
    /// `method_override = "why"`: the reviewed reason an `observe` action uses a method
    /// meant to change state.
    pub(crate) method_override: Setting<LitStr>,
    /// `idempotent`: the author declares a repeated call with the same arguments adds
    /// nothing. A bare flag.
    pub(crate) idempotent: Setting<()>,
    /// Keys an unknown key looked like (`efect` → `effect`): already reported, so not
    /// reported again as missing.
    pub(crate) misspelled: Vec<&'static str>,
}

/// The channel target attribute: `#[http]`, `#[ssh]` or `#[channel]`.
pub(crate) struct TargetAttr {
    /// The attribute's path (`http`, …), for spans.
    pub(crate) path: syn::Path,
    pub(crate) kind: TargetKind,
}

/// What the target attribute says.
#[allow(
    clippy::large_enum_variant,
    reason = "one value per derive; boxing would only add noise"
)]
pub(crate) enum TargetKind {
    Http(HttpAttr),
    Ssh(SshAttr),
    Channel(ChannelAttr),
}

/// A reference to an input field by its JSON name, as written in an attribute.
pub(crate) struct FieldRef {
    pub(crate) name: String,
    pub(crate) span: Span,
}

/// `status(code) = status`, `status(code) = status(empty)`,
/// `status(code) = status(value = "…")` or `exit(code) = status`.
pub(crate) struct CodeRule<C> {
    pub(crate) code: C,
    pub(crate) code_lit: LitInt,
    pub(crate) status: Kw<Status>,
    /// Where the result comes from, when the author said (`None`: the body).
    pub(crate) result: Option<RuleResult>,
}

/// What a status rule says the result is, instead of the body.
pub(crate) enum RuleResult {
    /// `(empty)`: no body; the result is `null`. The keyword, for spans.
    Empty(Ident),
    /// `(value = "…")`: the status is the answer; the literal was checked to be JSON.
    Value(LitStr),
}

impl RuleResult {
    /// The span of what the author wrote.
    pub(crate) fn span(&self) -> Span {
        match self {
            Self::Empty(ident) => ident.span(),
            Self::Value(lit) => lit.span(),
        }
    }
}

/// `header("Name" = field)`.
pub(crate) struct Header {
    pub(crate) name: LitStr,
    pub(crate) field: FieldRef,
}

/// A duration as the author wrote it (`"400ms"`), in milliseconds.
pub(crate) struct Millis {
    pub(crate) ms: u64,
    pub(crate) lit: LitStr,
}

/// A whole number the author wrote, in range.
pub(crate) struct Number<N> {
    pub(crate) value: N,
}

/// `#[http(...)]`.
#[derive(Default)]
pub(crate) struct HttpAttr {
    /// The method and its path template; `Setting::key` is the method key.
    pub(crate) method: Setting<(Method, LitStr)>,
    pub(crate) query: Vec<FieldRef>,
    pub(crate) headers: Vec<Header>,
    pub(crate) statuses: Vec<CodeRule<u16>>,
    /// `result = T`, or `result = ()` for no data; required.
    pub(crate) result: Setting<Type>,
    /// `timeout = "5s"`: the total timeout of one request.
    pub(crate) timeout: Setting<Millis>,
    /// `connect_timeout = "2s"`.
    pub(crate) connect_timeout: Setting<Millis>,
    /// `max_attempts = 3`: requests one attempt may send, `1..=5`.
    pub(crate) max_attempts: Setting<Number<u32>>,
    /// `max_retry_after = "30s"`: whole seconds.
    pub(crate) max_retry_after: Setting<Millis>,
    /// `max_response_bytes = 65536`.
    pub(crate) max_response_bytes: Setting<Number<u64>>,
    /// `message_field = "/error/message"`: a JSON pointer into an error body.
    pub(crate) message_field: Setting<LitStr>,
}

/// `#[ssh(...)]`.
#[derive(Default)]
pub(crate) struct SshAttr {
    pub(crate) host: Setting<LitStr>,
    pub(crate) argv: Setting<Vec<LitStr>>,
    pub(crate) exits: Vec<CodeRule<u32>>,
    /// `timeout = "30s"`: how long the command may run.
    pub(crate) timeout: Setting<Millis>,
    /// `output_cap = 65536`: bytes kept per output stream.
    pub(crate) output_cap: Setting<Number<usize>>,
}

/// `#[channel(...)]`.
#[derive(Default)]
pub(crate) struct ChannelAttr {
    pub(crate) name: Setting<LitStr>,
}

/// One named field of the input struct.
pub(crate) struct Field<'a> {
    pub(crate) ident: &'a Ident,
    pub(crate) ty: &'a Type,
    /// The name the agent sends (after serde renames).
    pub(crate) json_name: String,
    /// Whether the field is read from the JSON arguments at all (not `#[serde(skip)]`).
    pub(crate) deserialized: bool,
    /// `#[serde(flatten)]`: the field's own fields are inlined, under names unknown here.
    pub(crate) flatten: bool,
    /// `#[scope(kind)]`: the scope kind.
    pub(crate) scope: Option<Ident>,
    /// `#[audit_note]`: the attribute's span.
    pub(crate) audit_note: Option<Span>,
    /// `#[policy]`: the attribute's span; the host's policy sees the field.
    pub(crate) policy: Option<Span>,
    /// `#[ssh(allow_leading_dash)]` on the field: the key's span.
    pub(crate) allow_leading_dash: Option<Span>,
}

/// The parsed input struct.
pub(crate) struct Input<'a> {
    pub(crate) ident: &'a Ident,
    pub(crate) doc: Option<Doc>,
    pub(crate) action: ActionAttr,
    pub(crate) target: Option<TargetAttr>,
    pub(crate) fields: Vec<Field<'a>>,
}
