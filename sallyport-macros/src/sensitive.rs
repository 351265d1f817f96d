//! `#[derive(Sensitive)]`: a result type's personal-data declarations, from its fields'
//! `#[sensitive(…)]` attributes. Every field's JSON name follows serde's `rename` and
//! `rename_all` (the serialized side, since the agent reads the serialized result); a field
//! without the attribute passes on the declarations of its own type, when it has any.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt as _;
use syn::spanned::Spanned as _;
use syn::{Data, DeriveInput, Error, Fields, Ident, Token, Type};

use crate::attr::{Errors, Keyword, Personal, RenameRule, side_name, skip_serde_value};

/// What the agent gets of one field.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Handling {
    Mask,
    Drop,
    Keep,
    Detect,
}

impl Handling {
    fn variant(self) -> Ident {
        let name = match self {
            Self::Mask => "Mask",
            Self::Drop => "Drop",
            Self::Keep => "Keep",
            Self::Detect => "Detect",
        };
        Ident::new(name, Span::call_site())
    }
}

/// One field's `#[sensitive(…)]`, read.
struct Declared {
    kinds: Vec<Personal>,
    handling: Handling,
}

pub(crate) fn derive(input: &DeriveInput) -> TokenStream {
    match expand(input) {
        Ok(tokens) => tokens,
        Err(error) => error.to_compile_error(),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let Data::Struct(data) = &input.data else {
        return Err(Error::new(
            input.ident.span(),
            "`#[derive(Sensitive)]` is for a result struct with named fields",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(Error::new(
            input.ident.span(),
            "`#[derive(Sensitive)]` is for a result struct with named fields",
        ));
    };
    if !input.generics.params.is_empty() {
        return Err(Error::new(
            input.generics.span(),
            "`#[derive(Sensitive)]` does not take a generic struct: the executor reads the \
             declarations of the concrete result type",
        ));
    }
    let mut errs = Errors::default();
    let mut rename_all = RenameRule::None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _serde_reports_mistakes = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename_all") {
                if let Some(rule) = side_name(&meta, "serialize")?
                    .as_deref()
                    .and_then(RenameRule::from_str)
                {
                    rename_all = rule;
                }
            } else {
                skip_serde_value(&meta)?;
            }
            Ok(())
        });
    }
    let p = quote!(::sallyport_core::__private);
    let mut body = TokenStream::new();
    for field in &fields.named {
        body.extend(field_tokens(field, rename_all, &mut errs));
    }
    errs.finish()?;
    let ident = &input.ident;
    Ok(quote! {
        #[automatically_derived]
        impl #p::Sensitive for #ident {
            fn sensitive_fields() -> #p::Vec<#p::SensitiveField> {
                #[allow(unused_mut)]
                let mut fields = #p::Vec::new();
                #body
                fields
            }
        }
    })
}

/// What serde says of one field: its serialized name, and whether it is skipped, flattened
/// or has a default.
struct SerdeField {
    name: String,
    skipped: bool,
    flatten: bool,
    default: bool,
}

fn serde_field(field: &syn::Field, ident: &Ident, rename_all: RenameRule) -> SerdeField {
    let mut name = rename_all.apply_to_field(&ident.unraw().to_string());
    let mut skipped = false;
    let mut flatten = false;
    let mut default = false;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _serde_reports_mistakes = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                if let Some(renamed) = side_name(&meta, "serialize")? {
                    name = renamed;
                }
            } else if meta.path.is_ident("skip") || meta.path.is_ident("skip_serializing") {
                skipped = true;
            } else if meta.path.is_ident("flatten") {
                flatten = true;
            } else if meta.path.is_ident("default") {
                default = true;
                skip_serde_value(&meta)?;
            } else {
                skip_serde_value(&meta)?;
            }
            Ok(())
        });
    }
    SerdeField {
        name,
        skipped,
        flatten,
        default,
    }
}

/// The generated lines for one field: its declaration, or its type's passed on.
fn field_tokens(field: &syn::Field, rename_all: RenameRule, errs: &mut Errors) -> TokenStream {
    let p = quote!(::sallyport_core::__private);
    let Some(ident) = &field.ident else {
        return TokenStream::new();
    };
    let SerdeField {
        name,
        skipped,
        flatten,
        default,
    } = serde_field(field, ident, rename_all);
    let mut declared = None;
    for attr in field
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("sensitive"))
    {
        if declared.is_some() {
            errs.at(attr.span(), "one `#[sensitive(…)]` per field");
            return TokenStream::new();
        }
        match parse_sensitive(attr, &field.ty, default, errs) {
            Some(d) => declared = Some(d),
            None => {
                declared = Some(Declared {
                    kinds: Vec::new(),
                    handling: Handling::Keep,
                });
            }
        }
    }
    if skipped {
        if declared.is_some() {
            errs.at(
                ident.span(),
                "this field is never serialized, so it never reaches the agent: \
                 `#[sensitive]` has nothing to do here",
            );
        }
        return TokenStream::new();
    }
    if name == "*" {
        errs.at(
            ident.span(),
            "a field named `*` cannot be declared: `*` stands for every array item",
        );
        return TokenStream::new();
    }
    let pointer = format!("/{}", name.replace('~', "~0").replace('/', "~1"));
    let ty = &field.ty;
    match declared {
        Some(d) if !d.kinds.is_empty() => {
            if flatten {
                errs.at(ident.span(), "a `#[serde(flatten)]` field has no value of its own to mark; mark the fields of its type");
                return TokenStream::new();
            }
            let kinds = d
                .kinds
                .iter()
                .map(|k| Ident::new(k.variant(), Span::call_site()));
            let handling = d.handling.variant();
            quote! {
                fields.push(#p::SensitiveField::new(
                    #pointer,
                    &[#(#p::PersonalKind::#kinds),*],
                    #p::Handling::#handling,
                ));
            }
        }
        Some(_) => TokenStream::new(),
        None => {
            let prefix = if flatten { String::new() } else { pointer };
            quote_spanned! {ty.span()=>
                {
                    #[allow(unused_imports)]
                    use #p::{SensitiveDeclared as _, SensitiveNone as _};
                    fields.extend(
                        (&#p::SensitiveProbe::<#ty>::new())
                            .sensitive_fields()
                            .into_iter()
                            .map(|f| f.under(#prefix)),
                    );
                }
            }
        }
    }
}

const USAGE: &str = "#[sensitive(email)], #[sensitive(card, drop)], #[sensitive(phone, keep)] or #[sensitive(detect(email, card))]";

/// Reads `#[sensitive(kind)]`, `#[sensitive(kind, drop | keep | mask)]` or
/// `#[sensitive(detect(kind, …))]`; `None` after an error.
fn parse_sensitive(
    attr: &syn::Attribute,
    ty: &Type,
    default: bool,
    errs: &mut Errors,
) -> Option<Declared> {
    let mut kinds: Vec<(Personal, Span)> = Vec::new();
    let mut handling: Option<(Handling, Span)> = None;
    let mut detect: Option<Span> = None;
    let mut reported = false;
    let usage = USAGE;
    let parsed = attr.parse_args_with(|input: syn::parse::ParseStream| {
        let items = input.parse_terminated(<syn::Meta as syn::parse::Parse>::parse, Token![,])?;
        for item in items {
            match &item {
                syn::Meta::Path(path) => {
                    let Some(word) = path.get_ident() else {
                        errs.at(path.span(), format!("expected {usage}"));
                        continue;
                    };
                    let name = word.unraw().to_string();
                    let chosen = match name.as_str() {
                        "mask" => Some(Handling::Mask),
                        "drop" => Some(Handling::Drop),
                        "keep" => Some(Handling::Keep),
                        _ => None,
                    };
                    if let Some(chosen) = chosen {
                        if handling.is_some() {
                            errs.at(word.span(), "say once what the agent gets: `mask`, `drop` or `keep`");
                        }
                        handling = Some((chosen, word.span()));
                    } else if let Some(kind) = Personal::from_name(&name) {
                        kinds.push((kind, word.span()));
                    } else {
                        errs.at(word.span(), Personal::unknown(&name, false));
                        reported = true;
                    }
                }
                syn::Meta::List(list) if list.path.is_ident("detect") => {
                    detect = Some(list.path.span());
                    let _reported = list.parse_nested_meta(|meta| {
                        let name = meta.path.get_ident().map(|i| i.unraw().to_string()).unwrap_or_default();
                        match Personal::from_name(&name) {
                            Some(kind) if kind.detectable() => kinds.push((kind, meta.path.span())),
                            Some(_) => errs.at(
                                meta.path.span(),
                                format!("`{name}` cannot be detected in free text: mark the field that holds it with `#[sensitive({name})]`"),
                            ),
                            None => {
                                errs.at(meta.path.span(), Personal::unknown(&name, false));
                                reported = true;
                            }
                        }
                        Ok(())
                    });
                }
                other => errs.at(other.span(), format!("expected {usage}")),
            }
        }
        Ok(())
    });
    if let Err(error) = parsed {
        errs.push(error);
        return None;
    }
    if reported {
        return None;
    }
    let read = Read {
        kinds,
        handling,
        detect,
    };
    checked(attr, read, ty, default, errs)
}

/// What one `#[sensitive(…)]` says, before its checks.
struct Read {
    kinds: Vec<(Personal, Span)>,
    handling: Option<(Handling, Span)>,
    detect: Option<Span>,
}

/// `read`, when it makes sense for a field of type `ty` (`default`: `#[serde(default)]`).
fn checked(
    attr: &syn::Attribute,
    read: Read,
    ty: &Type,
    default: bool,
    errs: &mut Errors,
) -> Option<Declared> {
    let usage = USAGE;
    let Read {
        kinds,
        handling,
        detect,
    } = read;
    if let Some(span) = detect {
        if let Some((_, at)) = handling {
            errs.at(at, "`detect(…)` masks what it finds where it stands; it takes no `mask`, `drop` or `keep`");
            return None;
        }
        if kinds.is_empty() {
            errs.at(
                span,
                "`detect(…)` needs the kinds to look for: `detect(email, card)`",
            );
            return None;
        }
        if is_number(ty) {
            errs.at(
                ty.span(),
                "`detect(…)` looks for personal data in text; this field holds no text",
            );
            return None;
        }
        return Some(Declared {
            kinds: kinds.into_iter().map(|(k, _)| k).collect(),
            handling: Handling::Detect,
        });
    }
    let (kind, extra) = match kinds.as_slice() {
        [] => {
            errs.at(
                attr.span(),
                format!("name the kind of personal data the field holds: {usage}"),
            );
            return None;
        }
        [(kind, _)] => (*kind, None),
        [_, (_, second), ..] => (kinds[0].0, Some(*second)),
    };
    if let Some(at) = extra {
        errs.at(
            at,
            "one kind per field; for free text that may hold several, write `detect(email, card)`",
        );
        return None;
    }
    let handling = handling.map_or(Handling::Mask, |(h, _)| h);
    if handling == Handling::Drop && !default && !is_option(ty) {
        errs.at(
            ty.span(),
            "`drop` removes the field from the answer, and the result type must still read without it: make the field an `Option<…>` or give it `#[serde(default)]`",
        );
        return None;
    }
    if handling == Handling::Mask && is_number(ty) {
        errs.at(
            ty.span(),
            format!("a mask is text (`{}`), which this field's type cannot hold: make the field a `String`, or write `drop` (with an `Option`) or `keep`", example(kind)),
        );
        return None;
    }
    Some(Declared {
        kinds: vec![kind],
        handling,
    })
}

fn example(kind: Personal) -> &'static str {
    match kind {
        Personal::Email => "j***@example.com",
        Personal::Iban => "DE** **** **** **** **30 00",
        Personal::Name => "J*** D***",
        Personal::BirthDate => "1984-**-**",
        Personal::IpAddress => "203.0.113.*",
        Personal::Address => "***",
        Personal::Phone | Personal::Card | Personal::NationalId => "************1111",
    }
}

/// The last path segment of `ty`, seen through `Option`, `Vec` and `Box`.
fn innermost(ty: &Type) -> Option<&syn::PathSegment> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if matches!(last.ident.to_string().as_str(), "Option" | "Vec" | "Box")
        && let syn::PathArguments::AngleBracketed(args) = &last.arguments
        && let Some(syn::GenericArgument::Type(inner)) = args.args.first()
    {
        return innermost(inner);
    }
    Some(last)
}

fn is_option(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.path.segments.last().is_some_and(|s| s.ident == "Option"))
}

/// Whether `ty` (through `Option`, `Vec`, `Box`) is a number or a `bool`.
fn is_number(ty: &Type) -> bool {
    innermost(ty).is_some_and(|segment| {
        matches!(
            segment.ident.to_string().as_str(),
            "u8" | "u16"
                | "u32"
                | "u64"
                | "u128"
                | "usize"
                | "i8"
                | "i16"
                | "i32"
                | "i64"
                | "i128"
                | "isize"
                | "f32"
                | "f64"
                | "bool"
        )
    })
}
