//! Phase 1: parse the input struct and its attributes into plain data.
//!
//! Parsing checks syntax and the domain of each single value (a known effect class, a status
//! code in range). Rules that relate several values live in `valid.rs`. Errors go to
//! [`Errors`] and parsing carries on after each one, so the author sees every mistake at once.

use proc_macro2::{Span, TokenTree};
use syn::ext::IdentExt as _;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{
    Attribute, Data, DeriveInput, Error, Expr, ExprLit, Fields, Ident, Lit, LitInt, LitStr, Meta,
    Token, Type, bracketed, parenthesized, token,
};

/// Collected errors, as serde's `Ctxt`: every phase pushes here and carries on.
#[derive(Default)]
pub(crate) struct Errors(Option<Error>);

impl Errors {
    /// Records one error.
    pub(crate) fn push(&mut self, error: Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Records an error at `span`.
    pub(crate) fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(Error::new(span, message));
    }

    /// `Ok` when nothing was recorded, else every error, combined.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// A fixed set of snake-case identifiers, such as the effect classes.
pub(crate) trait Keyword: Copy + 'static {
    /// What the keyword is, for messages: "effect class".
    const WHAT: &'static str;
    /// Every name, in the order messages list them.
    const NAMES: &'static [&'static str];
    /// The keyword named `name`.
    fn from_name(name: &str) -> Option<Self>;
    /// The snake-case name the author writes.
    fn name(self) -> &'static str;
    /// The name of the matching variant of the core enum.
    fn variant(self) -> &'static str;
}

macro_rules! keywords {
    ($(#[$doc:meta])* $ty:ident, $what:literal { $($variant:ident = $name:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
        pub(crate) enum $ty {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Keyword for $ty {
            const WHAT: &'static str = $what;
            const NAMES: &'static [&'static str] = &[$($name),*];

            fn from_name(name: &str) -> Option<Self> {
                match name {
                    $($name => Some(Self::$variant),)*
                    _ => None,
                }
            }

            fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)*
                }
            }

            fn variant(self) -> &'static str {
                match self {
                    $(Self::$variant => stringify!($variant),)*
                }
            }
        }
    };
}

keywords! {
    /// `EffectClass`.
    Effect, "effect class" {
        Observe = "observe",
        ReversibleChange = "reversible_change",
        ExternalCommitment = "external_commitment",
        IrreversibleOrBroad = "irreversible_or_broad",
    }
}

keywords! {
    /// `ConsentRule`, weakest first (the derived order is the strength order).
    Consent, "consent rule" {
        None = "none",
        Session = "session",
        PerCall = "per_call",
    }
}

keywords! {
    /// `RetryRule`.
    Retry, "retry rule" {
        Never = "never",
        Safe = "safe",
        IdempotencyKey = "idempotency_key",
    }
}

keywords! {
    /// `Externality`.
    Externality, "externality" {
        Internal = "internal",
        External = "external",
    }
}

keywords! {
    /// `Status`.
    Status, "status" {
        Completed = "completed",
        Pending = "pending",
        AlreadyInDesiredState = "already_in_desired_state",
        Rejected = "rejected",
        Unknown = "unknown",
    }
}

keywords! {
    /// `HttpMethod`; written as the key of the path (`post = "/v1/…"`).
    Method, "HTTP method" {
        Get = "get",
        Post = "post",
        Put = "put",
        Patch = "patch",
        Delete = "delete",
    }
}

impl Effect {
    /// The weakest consent rule an author may choose (mirrors `EffectClass::consent_floor`).
    pub(crate) fn consent_floor(self) -> Consent {
        match self {
            Self::Observe | Self::ReversibleChange => Consent::None,
            Self::ExternalCommitment | Self::IrreversibleOrBroad => Consent::PerCall,
        }
    }
}

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
    fn set(&mut self, key: Ident, attr: &str, value: syn::Result<T>) -> syn::Result<()> {
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
    pub(crate) scope: Setting<LitStr>,
    pub(crate) returns: Setting<LitStr>,
    pub(crate) summary: Setting<LitStr>,
    /// `idempotent`: the author declares a repeated call with the same arguments adds
    /// nothing. A bare flag.
    pub(crate) idempotent: Setting<()>,
    /// Keys an unknown key looked like (`efect` → `effect`): already reported, so not
    /// reported again as missing.
    pub(crate) misspelled: Vec<&'static str>,
}

const ACTION_KEYS: &[&str] = &[
    "name",
    "effect",
    "consent",
    "retry",
    "reconcile",
    "credential",
    "data",
    "externality",
    "scope",
    "returns",
    "summary",
    "idempotent",
];
const HTTP_KEYS: &[&str] = &[
    "get", "post", "put", "patch", "delete", "query", "header", "status", "result",
];
const SSH_KEYS: &[&str] = &["host", "argv", "exit"];
const CHANNEL_KEYS: &[&str] = &["name"];

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

/// `status(code) = status` or `exit(code) = status`.
pub(crate) struct CodeRule<C> {
    pub(crate) code: C,
    pub(crate) code_lit: LitInt,
    pub(crate) status: Kw<Status>,
}

/// `header("Name" = field)`.
pub(crate) struct Header {
    pub(crate) name: LitStr,
    pub(crate) field: FieldRef,
}

/// `#[http(...)]`.
#[derive(Default)]
pub(crate) struct HttpAttr {
    /// The method and its path template; `Setting::key` is the method key.
    pub(crate) method: Setting<(Method, LitStr)>,
    pub(crate) query: Vec<FieldRef>,
    pub(crate) headers: Vec<Header>,
    pub(crate) statuses: Vec<CodeRule<u16>>,
    pub(crate) result: Setting<Type>,
}

/// `#[ssh(...)]`.
#[derive(Default)]
pub(crate) struct SshAttr {
    pub(crate) host: Setting<LitStr>,
    pub(crate) argv: Setting<Vec<LitStr>>,
    pub(crate) exits: Vec<CodeRule<u32>>,
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

impl<'a> Input<'a> {
    /// Parses the struct, recording every mistake in `errs`. `None` when the input is not a
    /// struct with named fields, since nothing else can be checked then.
    pub(crate) fn from_syn(input: &'a DeriveInput, errs: &mut Errors) -> Option<Self> {
        let ident = &input.ident;
        let fields = match &input.data {
            Data::Struct(data) => match &data.fields {
                Fields::Named(fields) => fields,
                Fields::Unnamed(fields) => {
                    errs.push(Error::new_spanned(
                        fields,
                        format!(
                            "#[derive(Action)] needs named fields, but `{ident}` is a tuple \
                             struct; the field names are the argument names the agent sends: \
                             `struct {ident} {{ … }}`"
                        ),
                    ));
                    return None;
                }
                Fields::Unit => {
                    errs.at(
                        ident.span(),
                        format!(
                            "`{ident}` is a unit struct, but the agent sends a JSON object; \
                             write an action without inputs as `struct {ident} {{}}`"
                        ),
                    );
                    return None;
                }
            },
            Data::Enum(data) => {
                errs.at(
                    data.enum_token.span,
                    format!(
                        "#[derive(Action)] works on structs, and `{ident}` is an enum; an action \
                         takes one JSON object of named arguments, so write one struct per action"
                    ),
                );
                return None;
            }
            Data::Union(data) => {
                errs.at(
                    data.union_token.span,
                    format!(
                        "#[derive(Action)] works on structs, and `{ident}` is a union; write a \
                         struct with named fields"
                    ),
                );
                return None;
            }
        };
        if !input.generics.params.is_empty() {
            errs.push(Error::new_spanned(
                &input.generics,
                format!(
                    "an action is one concrete type, so `{ident}` cannot have generic \
                     parameters; every instantiation would share one action name"
                ),
            ));
        }

        let (action, target, rename_all) = parse_container_attrs(&input.attrs, errs);
        let fields = fields
            .named
            .iter()
            .filter_map(|field| Some(parse_field(field.ident.as_ref()?, field, rename_all, errs)))
            .collect();
        Some(Self {
            ident,
            doc: parse_doc(&input.attrs, errs),
            action,
            target,
            fields,
        })
    }
}

/// Reads `#[action]`, the target attribute and serde's `rename_all` from the struct.
fn parse_container_attrs(
    attrs: &[Attribute],
    errs: &mut Errors,
) -> (ActionAttr, Option<TargetAttr>, RenameRule) {
    let mut action = ActionAttr::default();
    let mut target: Option<TargetAttr> = None;
    let mut rename_all = RenameRule::None;
    for attr in attrs {
        let path = attr.path();
        if path.is_ident("action") {
            if action.attr.is_none() {
                action.attr = Some(attr.clone());
            }
            parse_action(attr, &mut action, errs);
        } else if path.is_ident("http") || path.is_ident("ssh") || path.is_ident("channel") {
            if let Some(first) = &target {
                errs.push(Error::new_spanned(
                    attr,
                    format!(
                        "an action has one channel target, and `#[{}]` is already set; \
                         remove one of the two",
                        path_name(&first.path)
                    ),
                ));
                continue;
            }
            let kind = if path.is_ident("http") {
                TargetKind::Http(parse_http(attr, errs))
            } else if path.is_ident("ssh") {
                TargetKind::Ssh(parse_ssh(attr, errs))
            } else {
                TargetKind::Channel(parse_channel(attr, errs))
            };
            target = Some(TargetAttr {
                path: path.clone(),
                kind,
            });
        } else if path.is_ident("scope") || path.is_ident("audit_note") {
            errs.push(Error::new_spanned(
                attr,
                format!(
                    "`#[{}]` goes on a field, not on the struct",
                    path_name(path)
                ),
            ));
        } else if path.is_ident("serde") {
            parse_serde_container(attr, &mut rename_all);
        }
    }
    (action, target, rename_all)
}

fn path_name(path: &syn::Path) -> String {
    path.get_ident()
        .map_or_else(|| "?".to_owned(), ToString::to_string)
}

/// Parses the entries of `#[name(key = value, key(...) = value, …)]`, calling `entry` with
/// each key and the stream positioned after it. An entry that fails is recorded and skipped
/// up to the next comma.
fn parse_list(
    attr: &Attribute,
    errs: &mut Errors,
    mut entry: impl FnMut(Ident, ParseStream) -> syn::Result<()>,
) {
    let name = path_name(attr.path());
    if !matches!(attr.meta, Meta::List(_)) {
        errs.push(Error::new_spanned(
            attr,
            format!("expected `#[{name}(key = value, …)]`"),
        ));
        return;
    }
    let parsed = attr.parse_args_with(|input: ParseStream| {
        while !input.is_empty() {
            match input.call(Ident::parse_any) {
                Ok(key) => {
                    if let Err(error) = entry(key, input) {
                        errs.push(error);
                        skip_entry(input);
                    }
                }
                Err(error) => {
                    errs.push(Error::new(
                        error.span(),
                        format!("expected a key, as in `#[{name}(key = value)]`"),
                    ));
                    skip_entry(input);
                }
            }
            if input.is_empty() {
                break;
            }
            if let Err(error) = input.parse::<Token![,]>() {
                errs.push(error);
                skip_entry(input);
                let _: Option<Token![,]> = input.parse()?;
            }
        }
        Ok(())
    });
    if let Err(error) = parsed {
        errs.push(error);
    }
}

fn skip_entry(input: ParseStream) {
    while !input.is_empty() && !input.peek(Token![,]) {
        if input.parse::<TokenTree>().is_err() {
            break;
        }
    }
}

fn unknown_key(key: &Ident, attr: &str, known: &[&str]) -> Error {
    let name = key.unraw().to_string();
    let mut message = format!(
        "unknown key `{name}` in #[{attr}]; expected {}",
        one_of(known)
    );
    if let Some(close) = closest(&name, known.iter().copied()) {
        message = format!("{message} (did you mean `{close}`?)");
    }
    Error::new(key.span(), message)
}

/// "`a`", "`a` or `b`", "one of `a`, `b`, `c`".
pub(crate) fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [a, b] => format!("{a} or {b}"),
        _ => format!("one of {}", quoted.join(", ")),
    }
}

/// The candidate nearest to `name` by edit distance, if it is near enough to be a typo.
pub(crate) fn closest<'c>(
    name: &str,
    candidates: impl Iterator<Item = &'c str>,
) -> Option<&'c str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .map(|candidate| (edit_distance(name, candidate), candidate))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// `=` after `key`, or an error showing the expected form.
fn expect_eq(input: ParseStream, key: &Ident, usage: &str) -> syn::Result<()> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        Ok(())
    } else {
        Err(Error::new(key.span(), format!("expected `{usage}`")))
    }
}

fn parse_str(input: ParseStream, usage: &str) -> syn::Result<LitStr> {
    if input.peek(LitStr) {
        input.parse()
    } else {
        Err(input.error(format!("expected a string literal: `{usage}`")))
    }
}

fn parse_keyword<K: Keyword>(input: ParseStream, key: &Ident) -> syn::Result<Kw<K>> {
    let unknown = |span: Span, text: &str| {
        Error::new(
            span,
            format!(
                "unknown {} `{text}`; expected {}",
                K::WHAT,
                one_of(K::NAMES)
            ),
        )
    };
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        let text = lit.value();
        return Err(if K::from_name(&text).is_some() {
            Error::new(lit.span(), format!("write `{key} = {text}` without quotes"))
        } else {
            unknown(lit.span(), &text)
        });
    }
    let ident = input
        .call(Ident::parse_any)
        .map_err(|e| Error::new(e.span(), format!("expected {}", one_of(K::NAMES))))?;
    let text = ident.unraw().to_string();
    match K::from_name(&text) {
        Some(value) => Ok(Kw { value, ident }),
        None => Err(unknown(ident.span(), &text)),
    }
}

fn parse_field_ref(input: ParseStream) -> syn::Result<FieldRef> {
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        Ok(FieldRef {
            name: lit.value(),
            span: lit.span(),
        })
    } else {
        let ident = input
            .call(Ident::parse_any)
            .map_err(|e| Error::new(e.span(), "expected a field name"))?;
        Ok(FieldRef {
            name: ident.unraw().to_string(),
            span: ident.span(),
        })
    }
}

fn parenthesized_after<'p>(
    input: ParseStream<'p>,
    key: &Ident,
    usage: &str,
) -> syn::Result<syn::parse::ParseBuffer<'p>> {
    if !input.peek(token::Paren) {
        return Err(Error::new(key.span(), format!("expected `{usage}`")));
    }
    let content;
    parenthesized!(content in input);
    Ok(content)
}

fn parse_code<C: TryFrom<u64>>(
    input: ParseStream,
    key: &Ident,
    usage: &str,
    range: std::ops::RangeInclusive<u64>,
    what: &str,
) -> syn::Result<CodeRule<C>> {
    let content = parenthesized_after(input, key, usage)?;
    let code_lit: LitInt = content
        .parse()
        .map_err(|e| Error::new(e.span(), format!("expected {what}: `{usage}`")))?;
    if !content.is_empty() {
        return Err(content.error(format!("expected one {what}: `{usage}`")));
    }
    let code = code_lit
        .base10_parse::<u64>()
        .ok()
        .filter(|code| range.contains(code))
        .and_then(|code| C::try_from(code).ok())
        .ok_or_else(|| {
            Error::new(
                code_lit.span(),
                format!(
                    "{what} `{}` is out of range; expected {}..={}",
                    code_lit,
                    range.start(),
                    range.end()
                ),
            )
        })?;
    expect_eq(input, key, usage)?;
    let status = parse_keyword::<Status>(input, key)?;
    Ok(CodeRule {
        code,
        code_lit,
        status,
    })
}

fn parse_action(attr: &Attribute, action: &mut ActionAttr, errs: &mut Errors) {
    parse_list(attr, errs, |key, input| {
        let name = key.unraw().to_string();
        match name.as_str() {
            "name" => {
                expect_eq(input, &key, "name = \"snake_case_name\"")?;
                let value = parse_str(input, "name = \"snake_case_name\"");
                action.name.set(key, "action", value)
            }
            "effect" => {
                expect_eq(input, &key, "effect = observe")?;
                let value = parse_keyword(input, &key);
                action.effect.set(key, "action", value)
            }
            "consent" => {
                expect_eq(input, &key, "consent = per_call")?;
                let value = parse_keyword(input, &key);
                action.consent.set(key, "action", value)
            }
            "retry" => {
                expect_eq(input, &key, "retry = never")?;
                let value = parse_keyword(input, &key);
                action.retry.set(key, "action", value)
            }
            "reconcile" => {
                expect_eq(input, &key, "reconcile = \"get_status_action\"")?;
                let value = parse_str(input, "reconcile = \"get_status_action\"");
                action.reconcile.set(key, "action", value)
            }
            "credential" => {
                expect_eq(input, &key, "credential = \"vault-name\"")?;
                let value = parse_str(input, "credential = \"vault-name\"");
                action.credential.set(key, "action", value)
            }
            "data" => {
                expect_eq(input, &key, "data = [pii, financial]")?;
                let value = parse_data(input);
                action.data.set(key, "action", value)
            }
            "externality" => {
                expect_eq(input, &key, "externality = internal")?;
                let value = parse_keyword(input, &key);
                action.externality.set(key, "action", value)
            }
            "scope" => {
                expect_eq(input, &key, "scope = \"One project.\"")?;
                let value = parse_str(input, "scope = \"One project.\"");
                action.scope.set(key, "action", value)
            }
            "returns" => {
                expect_eq(input, &key, "returns = \"The new state.\"")?;
                let value = parse_str(input, "returns = \"The new state.\"");
                action.returns.set(key, "action", value)
            }
            "summary" => {
                expect_eq(input, &key, "summary = \"One line.\"")?;
                let value = parse_str(input, "summary = \"One line.\"");
                action.summary.set(key, "action", value)
            }
            "idempotent" => {
                if input.peek(Token![=]) {
                    return Err(Error::new(
                        key.span(),
                        "`idempotent` is a flag: write `idempotent` alone to declare that \
                         repeating a call with the same arguments changes nothing more, or \
                         leave it out",
                    ));
                }
                action.idempotent.set(key, "action", Ok(()))
            }
            _ => {
                if let Some(close) = closest(&name, ACTION_KEYS.iter().copied()) {
                    action.misspelled.push(close);
                }
                Err(unknown_key(&key, "action", ACTION_KEYS))
            }
        }
    });
}

fn parse_data(input: ParseStream) -> syn::Result<Vec<Ident>> {
    if !input.peek(token::Bracket) {
        return Err(input.error("expected a list of data classes: `data = [pii, financial]`"));
    }
    let content;
    bracketed!(content in input);
    let classes = Punctuated::<Ident, Token![,]>::parse_terminated_with(&content, |input| {
        if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            return Err(Error::new(
                lit.span(),
                format!("write the data class `{}` without quotes", lit.value()),
            ));
        }
        input
            .call(Ident::parse_any)
            .map_err(|e| Error::new(e.span(), "expected a data class, such as `pii`"))
    })?;
    Ok(classes.into_iter().collect())
}

fn parse_http(attr: &Attribute, errs: &mut Errors) -> HttpAttr {
    let mut http = HttpAttr::default();
    parse_list(attr, errs, |key, input| {
        let name = key.unraw().to_string();
        if let Some(method) = Method::from_name(&name) {
            let usage = format!("{name} = \"/path\"");
            expect_eq(input, &key, &usage)?;
            let path = parse_str(input, &usage)?;
            if let Some(first) = &http.method.key {
                return Err(Error::new(
                    key.span(),
                    format!(
                        "an HTTP target has one method, and `{first}` is already set; \
                         remove one of the two"
                    ),
                ));
            }
            return http.method.set(key, "http", Ok((method, path)));
        }
        match name.as_str() {
            "query" => {
                let content = parenthesized_after(input, &key, "query(field, …)")?;
                let fields = Punctuated::<FieldRef, Token![,]>::parse_terminated_with(
                    &content,
                    parse_field_ref,
                )?;
                http.query.extend(fields);
                Ok(())
            }
            "header" => {
                let content = parenthesized_after(input, &key, "header(\"Header-Name\" = field)")?;
                let headers =
                    Punctuated::<Header, Token![,]>::parse_terminated_with(&content, |input| {
                        let name = parse_str(input, "header(\"Header-Name\" = field)")?;
                        if !input.peek(Token![=]) {
                            return Err(input.error(
                                "expected `= field` after the header name: \
                                 `header(\"Header-Name\" = field)`",
                            ));
                        }
                        input.parse::<Token![=]>()?;
                        let field = parse_field_ref(input)?;
                        Ok(Header { name, field })
                    })?;
                http.headers.extend(headers);
                Ok(())
            }
            "status" => {
                let rule = parse_code(
                    input,
                    &key,
                    "status(202) = pending",
                    100..=599,
                    "HTTP status code",
                )?;
                http.statuses.push(rule);
                Ok(())
            }
            "result" => {
                expect_eq(input, &key, "result = ResultType")?;
                let value = input.parse::<Type>();
                http.result.set(key, "http", value)
            }
            "credential" => Err(Error::new(
                key.span(),
                "the credential binding belongs to the action, not the channel: move it to \
                 `#[action(credential = \"…\")]`",
            )),
            _ => Err(unknown_key(&key, "http", HTTP_KEYS)),
        }
    });
    http
}

fn parse_ssh(attr: &Attribute, errs: &mut Errors) -> SshAttr {
    let mut ssh = SshAttr::default();
    parse_list(attr, errs, |key, input| {
        match key.unraw().to_string().as_str() {
            "host" => {
                expect_eq(input, &key, "host = \"inventory-name\"")?;
                let value = parse_str(input, "host = \"inventory-name\"");
                ssh.host.set(key, "ssh", value)
            }
            "argv" => {
                expect_eq(input, &key, "argv = [\"program\", \"arg\"]")?;
                let value = parse_argv(input);
                ssh.argv.set(key, "ssh", value)
            }
            "exit" => {
                let rule = parse_code(
                    input,
                    &key,
                    "exit(3) = already_in_desired_state",
                    0..=255,
                    "exit code",
                )?;
                ssh.exits.push(rule);
                Ok(())
            }
            "credential" => Err(Error::new(
                key.span(),
                "the credential binding belongs to the action, not the channel: move it to \
                 `#[action(credential = \"…\")]`",
            )),
            _ => Err(unknown_key(&key, "ssh", SSH_KEYS)),
        }
    });
    ssh
}

fn parse_argv(input: ParseStream) -> syn::Result<Vec<LitStr>> {
    if !input.peek(token::Bracket) {
        return Err(input.error("expected a list of strings: `argv = [\"program\", \"arg\"]`"));
    }
    let content;
    bracketed!(content in input);
    let argv = Punctuated::<LitStr, Token![,]>::parse_terminated_with(&content, |input| {
        parse_str(input, "argv = [\"program\", \"arg\"]")
    })?;
    Ok(argv.into_iter().collect())
}

fn parse_channel(attr: &Attribute, errs: &mut Errors) -> ChannelAttr {
    let mut channel = ChannelAttr::default();
    parse_list(attr, errs, |key, input| {
        match key.unraw().to_string().as_str() {
            "name" => {
                expect_eq(input, &key, "name = \"channel\"")?;
                let value = parse_str(input, "name = \"channel\"");
                channel.name.set(key, "channel", value)
            }
            _ => Err(unknown_key(&key, "channel", CHANNEL_KEYS)),
        }
    });
    channel
}

fn parse_field<'a>(
    ident: &'a Ident,
    field: &'a syn::Field,
    rename_all: RenameRule,
    errs: &mut Errors,
) -> Field<'a> {
    let mut parsed = Field {
        ident,
        ty: &field.ty,
        json_name: rename_all.apply_to_field(&ident.unraw().to_string()),
        deserialized: true,
        flatten: false,
        scope: None,
        audit_note: None,
        allow_leading_dash: None,
    };
    let mut renamed = None;
    for attr in &field.attrs {
        let path = attr.path();
        if path.is_ident("scope") {
            let kind = match &attr.meta {
                Meta::List(_) => attr.parse_args_with(|input: ParseStream| {
                    if input.peek(LitStr) {
                        let lit: LitStr = input.parse()?;
                        return Err(Error::new(
                            lit.span(),
                            format!(
                                "write the scope kind without quotes: `#[scope({})]`",
                                lit.value()
                            ),
                        ));
                    }
                    input.call(Ident::parse_any).map_err(|e| {
                        Error::new(
                            e.span(),
                            "expected one scope kind, as in `#[scope(project)]`",
                        )
                    })
                }),
                _ => Err(Error::new_spanned(
                    attr,
                    "`#[scope]` needs the kind of object the field names, as in `#[scope(project)]`",
                )),
            };
            match kind {
                Ok(_) if parsed.scope.is_some() => errs.push(Error::new_spanned(
                    attr,
                    format!(
                        "field `{ident}` already has a scope tag; a field names one kind of object"
                    ),
                )),
                Ok(kind) => parsed.scope = Some(kind),
                Err(error) => errs.push(error),
            }
        } else if path.is_ident("audit_note") {
            if !matches!(attr.meta, Meta::Path(_)) {
                errs.push(Error::new_spanned(
                    attr,
                    "`#[audit_note]` takes no arguments",
                ));
            } else if parsed.audit_note.is_some() {
                errs.push(Error::new_spanned(
                    attr,
                    "duplicate `#[audit_note]` on this field",
                ));
            } else {
                parsed.audit_note = Some(path.span());
            }
        } else if path.is_ident("ssh") {
            parse_ssh_field(attr, &mut parsed, errs);
        } else if ["action", "http", "channel"]
            .iter()
            .any(|name| path.is_ident(name))
        {
            errs.push(Error::new_spanned(
                attr,
                format!(
                    "`#[{}]` goes on the struct, not on a field",
                    path_name(path)
                ),
            ));
        } else if path.is_ident("serde") {
            parse_serde_field(attr, &mut renamed, &mut parsed);
        }
    }
    if let Some(renamed) = renamed {
        parsed.json_name = renamed;
    }
    parsed
}

/// Keys of `#[ssh(...)]` on a field.
const SSH_FIELD_KEYS: &[&str] = &["allow_leading_dash"];

/// `#[ssh(allow_leading_dash)]` on a field. The struct's keys (`host`, `argv`, `exit`) are
/// refused here with a pointer to the struct.
fn parse_ssh_field(attr: &Attribute, field: &mut Field, errs: &mut Errors) {
    if !matches!(attr.meta, Meta::List(_)) {
        errs.push(Error::new_spanned(
            attr,
            "`#[ssh]` on a field takes `allow_leading_dash`, as in `#[ssh(allow_leading_dash)]`",
        ));
        return;
    }
    parse_list(attr, errs, |key, input| {
        match key.unraw().to_string().as_str() {
            "allow_leading_dash" if !input.is_empty() && !input.peek(Token![,]) => Err(Error::new(
                key.span(),
                "`allow_leading_dash` takes no value: write `#[ssh(allow_leading_dash)]`",
            )),
            "allow_leading_dash" if field.allow_leading_dash.is_some() => Err(Error::new(
                key.span(),
                "duplicate `allow_leading_dash` on this field",
            )),
            "allow_leading_dash" => {
                field.allow_leading_dash = Some(key.span());
                Ok(())
            }
            name if SSH_KEYS.contains(&name) => Err(Error::new(
                key.span(),
                format!("`{name}` goes in the struct's `#[ssh(...)]`, not on a field"),
            )),
            _ => Err(unknown_key(&key, "ssh", SSH_FIELD_KEYS)),
        }
    });
}

/// Reads the struct's doc comment. `None` when there is none, or it is blank.
fn parse_doc(attrs: &[Attribute], errs: &mut Errors) -> Option<Doc> {
    let mut raw = Vec::new();
    for attr in attrs {
        let Meta::NameValue(meta) = &attr.meta else {
            continue;
        };
        if !meta.path.is_ident("doc") {
            continue;
        }
        match &meta.value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => raw.extend(
                // `split`, not `lines`: an empty `///` line is a paragraph break.
                lit.value()
                    .split('\n')
                    .map(|line| line.trim_end_matches('\r').to_owned()),
            ),
            other => errs.push(Error::new_spanned(
                other,
                "the action's description must be a doc comment (`/// …`); a computed \
                 `#[doc = …]` cannot be checked at compile time",
            )),
        }
    }
    let text = unindent(&raw);
    if text.is_empty() {
        return None;
    }
    let summary = first_sentence(&text);
    Some(Doc { text, summary })
}

/// Strips the indentation common to all non-blank lines, trailing whitespace, and leading and
/// trailing blank lines.
fn unindent(lines: &[String]) -> String {
    let indent = lines
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.len() - line.trim_start().len())
        .min()
        .unwrap_or(0);
    let lines: Vec<&str> = lines
        .iter()
        .map(|line| line.get(indent..).unwrap_or("").trim_end())
        .collect();
    lines.join("\n").trim_matches('\n').to_owned()
}

/// The first sentence of the first paragraph, on one line.
pub(crate) fn first_sentence(text: &str) -> String {
    let paragraph: Vec<&str> = text
        .lines()
        .map(str::trim)
        .skip_while(|line| line.is_empty())
        .take_while(|line| !line.is_empty())
        .collect();
    let paragraph = paragraph.join(" ");
    match paragraph.find(". ") {
        Some(end) => paragraph[..=end].to_owned(),
        None => paragraph,
    }
}

/// Reads `#[serde(rename_all = "…")]` (or its `deserialize` half); anything else, including
/// mistakes, is serde's to report.
fn parse_serde_container(attr: &Attribute, rename_all: &mut RenameRule) {
    let _ignored_serde_reports_it = attr.parse_nested_meta(|meta| {
        if meta.path.is_ident("rename_all") {
            if let Some(rule) = deserialize_name(&meta)?
                .as_deref()
                .and_then(RenameRule::from_str)
            {
                *rename_all = rule;
            }
        } else {
            skip_serde_value(&meta)?;
        }
        Ok(())
    });
}

/// Reads `rename`, `skip`, `skip_deserializing` and `flatten` from a field's `#[serde]`.
fn parse_serde_field(attr: &Attribute, renamed: &mut Option<String>, field: &mut Field) {
    let _ignored_serde_reports_it = attr.parse_nested_meta(|meta| {
        if meta.path.is_ident("rename") {
            if let Some(name) = deserialize_name(&meta)? {
                *renamed = Some(name);
            }
        } else if meta.path.is_ident("skip") || meta.path.is_ident("skip_deserializing") {
            field.deserialized = false;
        } else if meta.path.is_ident("flatten") {
            field.flatten = true;
        } else {
            skip_serde_value(&meta)?;
        }
        Ok(())
    });
}

/// The name from `key = "name"` or `key(deserialize = "name")`.
fn deserialize_name(meta: &syn::meta::ParseNestedMeta) -> syn::Result<Option<String>> {
    if meta.input.peek(Token![=]) {
        let lit: LitStr = meta.value()?.parse()?;
        return Ok(Some(lit.value()));
    }
    let mut name = None;
    meta.parse_nested_meta(|inner| {
        if inner.path.is_ident("deserialize") {
            let lit: LitStr = inner.value()?.parse()?;
            name = Some(lit.value());
        } else {
            skip_serde_value(&inner)?;
        }
        Ok(())
    })?;
    Ok(name)
}

fn skip_serde_value(meta: &syn::meta::ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        let value = meta.value()?;
        skip_entry(value);
    } else if meta.input.peek(token::Paren) {
        meta.input.parse::<TokenTree>()?;
    }
    Ok(())
}

/// serde's `rename_all` rules, applied to field names as serde does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenameRule {
    None,
    LowerCase,
    UpperCase,
    PascalCase,
    CamelCase,
    SnakeCase,
    ScreamingSnakeCase,
    KebabCase,
    ScreamingKebabCase,
}

impl RenameRule {
    fn from_str(rule: &str) -> Option<Self> {
        Some(match rule {
            "lowercase" => Self::LowerCase,
            "UPPERCASE" => Self::UpperCase,
            "PascalCase" => Self::PascalCase,
            "camelCase" => Self::CamelCase,
            "snake_case" => Self::SnakeCase,
            "SCREAMING_SNAKE_CASE" => Self::ScreamingSnakeCase,
            "kebab-case" => Self::KebabCase,
            "SCREAMING-KEBAB-CASE" => Self::ScreamingKebabCase,
            _ => return None,
        })
    }

    /// The JSON name of the field `field` (mirrors `serde_derive`'s `apply_to_field`).
    pub(crate) fn apply_to_field(self, field: &str) -> String {
        match self {
            Self::None | Self::LowerCase | Self::SnakeCase => field.to_owned(),
            Self::UpperCase | Self::ScreamingSnakeCase => field.to_ascii_uppercase(),
            Self::PascalCase => {
                let mut pascal = String::new();
                let mut capitalize = true;
                for ch in field.chars() {
                    if ch == '_' {
                        capitalize = true;
                    } else if capitalize {
                        pascal.push(ch.to_ascii_uppercase());
                        capitalize = false;
                    } else {
                        pascal.push(ch);
                    }
                }
                pascal
            }
            Self::CamelCase => {
                let pascal = Self::PascalCase.apply_to_field(field);
                let mut chars = pascal.chars();
                chars.next().map_or_else(String::new, |first| {
                    first.to_ascii_lowercase().to_string() + chars.as_str()
                })
            }
            Self::KebabCase => field.replace('_', "-"),
            Self::ScreamingKebabCase => field.to_ascii_uppercase().replace('_', "-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn parse(input: &DeriveInput) -> (Option<Input<'_>>, Vec<String>) {
        let mut errs = Errors::default();
        let parsed = Input::from_syn(input, &mut errs);
        let messages = match errs.finish() {
            Ok(()) => Vec::new(),
            Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
        };
        (parsed, messages)
    }

    #[test]
    fn parses_every_action_key() {
        let input: DeriveInput = parse_quote! {
            /// Does one thing.
            #[action(name = "do_it", effect = external_commitment, consent = per_call,
                     retry = idempotency_key, reconcile = "check_it", credential = "api",
                     data = [pii, financial], externality = internal, scope = "One thing.",
                     returns = "The thing.", summary = "Does it.")]
            struct DoIt { a: String }
        };
        let (parsed, errors) = parse(&input);
        assert_eq!(errors, Vec::<String>::new());
        let action = parsed.expect("a struct").action;
        assert_eq!(
            action.name.get().map(LitStr::value).as_deref(),
            Some("do_it")
        );
        assert_eq!(
            action.effect.get().map(|k| k.value),
            Some(Effect::ExternalCommitment)
        );
        assert_eq!(
            action.consent.get().map(|k| k.value),
            Some(Consent::PerCall)
        );
        assert_eq!(
            action.retry.get().map(|k| k.value),
            Some(Retry::IdempotencyKey)
        );
        assert_eq!(
            action.externality.get().map(|k| k.value),
            Some(Externality::Internal)
        );
        let data: Vec<String> = action
            .data
            .get()
            .expect("data")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(data, ["pii", "financial"]);
    }

    #[test]
    fn idempotent_is_a_bare_flag() {
        let input: DeriveInput = parse_quote! {
            /// Sets one thing.
            #[action(name = "set_it", effect = reversible_change, idempotent)]
            struct SetIt { a: String }
        };
        let (parsed, errors) = parse(&input);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(parsed.expect("parsed").action.idempotent.get().is_some());
        let input: DeriveInput = parse_quote! {
            /// Sets one thing.
            #[action(name = "set_it", effect = reversible_change, idempotent = true)]
            struct SetIt { a: String }
        };
        let (_, errors) = parse(&input);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("`idempotent` is a flag"),
            "{errors:?}"
        );
    }

    #[test]
    fn collects_every_error_instead_of_stopping_at_the_first() {
        let input: DeriveInput = parse_quote! {
            /// Does one thing.
            #[action(name = "do_it", efect = observe, effect = destroy, retry = "safe")]
            #[http(post = "/x", status(700) = pending, status(201) = done)]
            struct DoIt { a: String }
        };
        let (_, errors) = parse(&input);
        assert_eq!(
            errors,
            [
                "unknown key `efect` in #[action]; expected one of `name`, `effect`, `consent`, \
                 `retry`, `reconcile`, `credential`, `data`, `externality`, `scope`, `returns`, \
                 `summary`, `idempotent` (did you mean `effect`?)",
                "unknown effect class `destroy`; expected one of `observe`, `reversible_change`, \
                 `external_commitment`, `irreversible_or_broad`",
                "write `retry = safe` without quotes",
                "HTTP status code `700` is out of range; expected 100..=599",
                "unknown status `done`; expected one of `completed`, `pending`, \
                 `already_in_desired_state`, `rejected`, `unknown`",
            ]
        );
    }

    #[test]
    fn a_key_that_is_set_twice_is_reported_once_at_the_second() {
        let input: DeriveInput = parse_quote! {
            /// Does one thing.
            #[action(name = "a", effect = observe)]
            #[action(name = "b")]
            struct DoIt {}
        };
        let (parsed, errors) = parse(&input);
        assert_eq!(
            errors,
            ["duplicate key `name` in #[action]; it is already set above"]
        );
        assert_eq!(
            parsed
                .expect("a struct")
                .action
                .name
                .get()
                .map(LitStr::value)
                .as_deref(),
            Some("a")
        );
    }

    #[test]
    fn json_names_follow_serde_renames() {
        let input: DeriveInput = parse_quote! {
            #[serde(rename_all = "camelCase")]
            struct DoIt {
                project_id: String,
                #[serde(rename = "the-build")] build_id: String,
                #[serde(rename(serialize = "x", deserialize = "y"))] other: String,
                #[serde(skip)] local: String,
                r#type: String,
            }
        };
        let (parsed, _) = parse(&input);
        let fields = parsed.expect("a struct").fields;
        let names: Vec<(&str, bool)> = fields
            .iter()
            .map(|f| (f.json_name.as_str(), f.deserialized))
            .collect();
        assert_eq!(
            names,
            [
                ("projectId", true),
                ("the-build", true),
                ("y", true),
                ("local", false),
                ("type", true)
            ]
        );
    }

    #[test]
    fn rename_rules_match_serde() {
        let cases = [
            (RenameRule::PascalCase, "PerPage"),
            (RenameRule::CamelCase, "perPage"),
            (RenameRule::ScreamingSnakeCase, "PER_PAGE"),
            (RenameRule::KebabCase, "per-page"),
            (RenameRule::ScreamingKebabCase, "PER-PAGE"),
            (RenameRule::LowerCase, "per_page"),
        ];
        for (rule, expected) in cases {
            assert_eq!(rule.apply_to_field("per_page"), expected);
        }
    }

    #[test]
    fn the_doc_comment_is_unindented_and_its_first_sentence_is_the_summary() {
        let input: DeriveInput = parse_quote! {
            /// Queue one tested build for the preview
            /// environment. It starts within a minute.
            ///
            ///     indented code
            struct DoIt {}
        };
        let (parsed, _) = parse(&input);
        let doc = parsed.expect("a struct").doc.expect("a doc comment");
        assert_eq!(
            doc.text,
            "Queue one tested build for the preview\nenvironment. It starts within a minute.\n\n    indented code"
        );
        assert_eq!(
            doc.summary,
            "Queue one tested build for the preview environment."
        );
    }

    #[test]
    fn a_blank_doc_comment_is_no_description() {
        let input: DeriveInput = parse_quote! {
            ///
            struct DoIt {}
        };
        assert!(parse(&input).0.expect("a struct").doc.is_none());
    }

    #[test]
    fn typos_find_their_key() {
        assert_eq!(
            closest("efect", ACTION_KEYS.iter().copied()),
            Some("effect")
        );
        assert_eq!(
            closest("reconcil", ACTION_KEYS.iter().copied()),
            Some("reconcile")
        );
        assert_eq!(closest("zzzzzz", ACTION_KEYS.iter().copied()), None);
    }
}
