//! Phase 3: write the `Action` impl of a checked input.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::{DeriveInput, Error, Ident, LitStr};

use crate::attr::{Errors, Input, Keyword, Personal, RuleResult, TargetKind};
use crate::valid::{self, Checked};

/// Parses, checks and expands `#[derive(Action)]`. The error holds every mistake found; the
/// caller turns it into compile errors next to a stub impl (`fallback.rs`).
pub(crate) fn derive(input: &DeriveInput) -> syn::Result<TokenStream> {
    let mut errs = Errors::default();
    let parsed = Input::from_syn(input, &mut errs);
    let checked = parsed
        .as_ref()
        .and_then(|parsed| valid::check(parsed, &mut errs));
    errs.finish()?;
    match checked {
        Some(checked) => Ok(expand(&checked)),
        // Unreachable: `from_syn` and `check` record an error whenever they return `None`.
        // Reported rather than panicked on, should that ever change.
        None => Err(Error::new(
            Span::call_site(),
            "#[derive(Action)] could not check this struct (a sallyport-macros bug; please \
             report it)",
        )),
    }
}

/// The path every generated item goes through.
fn private() -> TokenStream {
    quote!(::sallyport_core::__private)
}

/// The type's name, resolved at the call site as thiserror does, so it names the author's type
/// whatever the span of the derive input.
pub(crate) fn call_site_ident(ident: &Ident) -> Ident {
    let mut ident = ident.clone();
    ident.set_span(ident.span().resolved_at(Span::call_site()));
    ident
}

fn variant<K: Keyword>(keyword: K) -> Ident {
    Ident::new(keyword.variant(), Span::call_site())
}

fn expand(checked: &Checked) -> TokenStream {
    let p = private();
    let input = checked.input;
    let ident = call_site_ident(input.ident);
    let spec = spec(checked);
    let scope_values = scope_values(input);
    let audit_note = audit_note(input);
    let name = checked.name;
    let output = output(input);
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #p::Action for #ident {
                const NAME: &'static str = #name;
                type Output = #output;
                fn spec() -> #p::ActionSpec {
                    #spec
                }
                #scope_values
                #audit_note
            }
        };
    }
}

/// The `ActionSpec` builder chain.
fn spec(checked: &Checked) -> TokenStream {
    let p = private();
    let input = checked.input;
    let action = &input.action;
    let name = checked.name;
    let effect = variant(checked.effect);
    let description = &checked.doc.text;
    let summary = action
        .summary
        .get()
        .map_or_else(|| checked.doc.summary.clone(), LitStr::value);
    let mut spec = quote! {
        #p::ActionSpec::new(#name, #p::EffectClass::#effect)
            .with_description(#description)
            .with_summary(#summary)
    };
    if let Some(consent) = action.consent.get() {
        let consent = variant(consent.value);
        spec.extend(quote!(.with_consent(#p::ConsentRule::#consent)));
    }
    if let Some(retry) = action.retry.get() {
        let retry = variant(retry.value);
        spec.extend(quote!(.with_retry(#p::RetryRule::#retry)));
    }
    if action.idempotent.get().is_some() {
        spec.extend(quote!(.with_naturally_idempotent()));
    }
    for class in action.data.get().into_iter().flatten() {
        let class = class.to_string();
        spec.extend(quote!(.with_data_class(#p::DataClass::new(#class))));
    }
    if let Some(externality) = action.externality.get() {
        let externality = variant(externality.value);
        spec.extend(quote!(.with_externality(#p::Externality::#externality)));
    }
    if let Some(secrets) = action.secrets.get() {
        let secrets = variant(secrets.value);
        spec.extend(quote!(.with_secrets(#p::SecretMode::#secrets)));
    }
    if let Some(instructions) = action.instructions.get() {
        let instructions = variant(instructions.value);
        spec.extend(quote!(.with_instructions(#p::InstructionMode::#instructions)));
    }
    if let Some(kinds) = action.personal_data.get() {
        let kinds = kinds
            .iter()
            .filter_map(|k| Personal::from_name(&k.to_string()))
            .map(variant);
        spec.extend(quote!(.with_personal_data(&[#(#p::PersonalKind::#kinds),*])));
    }
    for field in &input.fields {
        if let Some(kind) = &field.scope {
            let json = &field.json_name;
            let kind = kind.to_string();
            spec.extend(quote!(.with_scope_tag(#json, #kind)));
        }
        if field.audit_note.is_some() {
            let json = &field.json_name;
            spec.extend(quote!(.with_audit_note_field(#json)));
        }
        if field.policy.is_some() {
            let json = &field.json_name;
            spec.extend(quote!(.with_policy_field(#json)));
        }
    }
    if let Some(reconcile) = action.reconcile.get() {
        spec.extend(quote!(.with_reconcile(#reconcile)));
    }
    if let Some(credential) = action.credential.get() {
        spec.extend(quote!(.with_credential(#credential)));
    }
    if let Some(scope) = action.scope.get() {
        spec.extend(quote!(.with_scope_text(#scope)));
    }
    if let Some(returns) = action.returns.get() {
        spec.extend(quote!(.with_result_text(#returns)));
    }
    if let Some(reason) = action.method_override.get() {
        spec.extend(quote!(.with_method_override(#reason)));
    }
    if let Some(target) = target(input) {
        spec.extend(quote!(.with_target(#target)));
    }
    // The result type's personal-data declarations, when it derives `Sensitive`; an empty
    // list (and so today's card and definition) when it does not.
    if let Some(TargetKind::Http(http)) = input.target.as_ref().map(|target| &target.kind)
        && let Some(ty) = http.result.get().filter(|ty| !is_unit(ty))
    {
        spec.extend(quote! {
            .with_sensitive({
                #[allow(unused_imports)]
                use #p::{SensitiveDeclared as _, SensitiveNone as _};
                (&#p::SensitiveProbe::<#ty>::new()).sensitive_fields()
            })
        });
    }
    spec
}

/// `Action::Output`: the declared `result = T` of an `#[http]` action, `CommandOutput` for
/// `#[ssh]`, and a JSON value for a custom channel or none.
fn output(input: &Input) -> TokenStream {
    let p = private();
    match input.target.as_ref().map(|target| &target.kind) {
        // `valid::check` refuses an `#[http]` without `result`.
        Some(TargetKind::Http(http)) => http
            .result
            .get()
            .map_or_else(|| quote!(()), |ty| quote!(#ty)),
        Some(TargetKind::Ssh(_)) => quote!(#p::CommandOutput),
        Some(TargetKind::Channel(_)) | None => quote!(#p::serde_json::Value),
    }
}

/// Whether `ty` is `()`: `result = ()` declares no data.
fn is_unit(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Tuple(tuple) if tuple.elems.is_empty())
}

/// The `Target`, when the action has one.
fn target(input: &Input) -> Option<TokenStream> {
    let p = private();
    Some(match &input.target.as_ref()?.kind {
        TargetKind::Http(http) => {
            // `valid::check` refuses an `#[http]` without a method.
            let (method, path) = http.method.get()?;
            let method = variant(*method);
            let mut target = quote!(#p::HttpTarget::new(#p::HttpMethod::#method, #path));
            for query in &http.query {
                let field = &query.name;
                target.extend(quote!(.with_query(#field)));
            }
            for header in &http.headers {
                let name = &header.name;
                let field = &header.field.name;
                target.extend(quote!(.with_header(#name, #field)));
            }
            for rule in &http.statuses {
                let code = rule.code;
                let status = variant(rule.status.value);
                target.extend(match &rule.result {
                    None => quote!(.with_status(#code, #p::Status::#status)),
                    Some(RuleResult::Empty(_)) => quote! {
                        .with_status_result(#code, #p::Status::#status, #p::StatusResult::Empty)
                    },
                    Some(RuleResult::Value(json)) => quote! {
                        .with_status_result(#code, #p::Status::#status, #p::status_value(#json))
                    },
                });
            }
            if let Some(ty) = http.result.get().filter(|ty| !is_unit(ty)) {
                let shape = quote_spanned!(ty.span()=> #p::result_shape::<#ty>());
                target.extend(quote!(.with_result(#shape)));
            }
            // The audit note stays in the audit record; the card says so, so the drift
            // checks and every channel see the field as never sent.
            for field in &input.fields {
                if field.audit_note.is_some() {
                    let json = &field.json_name;
                    target.extend(quote!(.with_omitted(#json)));
                }
            }
            if let Some(pointer) = http.message_field.get() {
                target.extend(quote!(.with_message_field(#pointer)));
            }
            if let Some(timeout) = http.connect_timeout.get() {
                let ms = timeout.ms;
                target.extend(quote!(.with_connect_timeout(#p::millis(#ms))));
            }
            if let Some(timeout) = http.timeout.get() {
                let ms = timeout.ms;
                target.extend(quote!(.with_total_timeout(#p::millis(#ms))));
            }
            if let Some(bytes) = http.max_response_bytes.get() {
                let bytes = bytes.value;
                target.extend(quote!(.with_max_response_bytes(#bytes)));
            }
            if let Some(wait) = http.max_retry_after.get() {
                let ms = wait.ms;
                target.extend(quote!(.with_max_retry_after(#p::millis(#ms))));
            }
            if let Some(attempts) = http.max_attempts.get() {
                let attempts = attempts.value;
                target.extend(quote!(.with_max_attempts(#attempts)));
            }
            quote!(#p::Target::Http(#target))
        }
        TargetKind::Ssh(ssh) => {
            // `valid::check` refuses an `#[ssh]` without a host or argv.
            let host = ssh.host.get()?;
            let argv = ssh.argv.get()?;
            let mut target = quote!(#p::SshTarget::new(#host, [#(#argv),*]));
            for rule in &ssh.exits {
                let code = rule.code;
                let status = variant(rule.status.value);
                target.extend(quote!(.with_exit(#code, #p::Status::#status)));
            }
            for field in &input.fields {
                if field.allow_leading_dash.is_some() {
                    let json = &field.json_name;
                    target.extend(quote!(.with_leading_dash_allowed(#json)));
                }
            }
            if let Some(timeout) = ssh.timeout.get() {
                let ms = timeout.ms;
                target.extend(quote!(.with_timeout(#p::millis(#ms))));
            }
            if let Some(cap) = ssh.output_cap.get() {
                let cap = cap.value;
                target.extend(quote!(.with_output_cap(#cap)));
            }
            quote!(#p::Target::Ssh(#target))
        }
        TargetKind::Channel(channel) => {
            let name = channel.name.get()?;
            quote! {
                #p::Target::custom(
                    #name,
                    #p::serde_json::Value::Object(#p::serde_json::Map::new()),
                )
            }
        }
    })
}

/// `Action::scope_values`. The call for a `#[scope(kind)]` field names the field's type with
/// the type's own span, so a type that cannot hold an identifier is reported there
/// (`ScopeValue`'s `on_unimplemented` message).
///
/// The method also reads every other field the agent sends: the channel takes them from the
/// JSON arguments, not from the struct, and without a read the author would get a
/// `dead_code` warning for each. Fields serde skips are left to the lint.
fn scope_values(input: &Input) -> Option<TokenStream> {
    let p = private();
    let mut pushes = Vec::new();
    let mut reads = Vec::new();
    for field in &input.fields {
        let member = field.ident;
        if let Some(kind) = &field.scope {
            let kind = kind.to_string();
            let ty = field.ty;
            let json = &field.json_name;
            let collect = quote_spanned!(ty.span()=> #p::scope_values_of::<#ty>);
            pushes.push(quote!(#collect(#kind, #json, &self.#member, &mut __values);));
        } else if field.deserialized && field.audit_note.is_none() {
            reads.push(quote!(&self.#member));
        }
    }
    if pushes.is_empty() && reads.is_empty() {
        return None;
    }
    let reads = (!reads.is_empty()).then(|| quote!(let _ = (#(#reads,)*);));
    let values = if pushes.is_empty() {
        quote!(#p::Vec::new())
    } else {
        quote! {
            let mut __values = #p::Vec::new();
            #(#pushes)*
            __values
        }
    };
    Some(quote! {
        fn scope_values(&self) -> #p::Vec<#p::ScopedValue> {
            #reads
            #values
        }
    })
}

/// `Action::audit_note`, when a field carries `#[audit_note]`; spanned at the field's type,
/// as for scope values.
fn audit_note(input: &Input) -> Option<TokenStream> {
    let p = private();
    let field = input
        .fields
        .iter()
        .find(|field| field.audit_note.is_some())?;
    let ty = field.ty;
    let member = field.ident;
    let note = quote_spanned!(ty.span()=> <#ty as #p::AuditNoteValue>::audit_note);
    Some(quote! {
        fn audit_note(&self) -> #p::Option<#p::String> {
            #note(&self.#member)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn expand_to_string(input: &DeriveInput) -> String {
        derive(input).expect("expands").to_string()
    }

    #[test]
    fn expands_to_an_impl_through_the_private_module() {
        let input: DeriveInput = parse_quote! {
            /// Read one invoice.
            #[action(name = "get_invoice", effect = observe, data = [financial])]
            #[http(get = "/v1/invoices/{invoice_id}", status(404) = rejected, result = ())]
            struct GetInvoice {
                #[scope(invoice)] invoice_id: String,
            }
        };
        let expected = quote! {
            const _: () = {
                #[automatically_derived]
                impl ::sallyport_core::__private::Action for GetInvoice {
                    const NAME: &'static str = "get_invoice";
                    type Output = ();
                    fn spec() -> ::sallyport_core::__private::ActionSpec {
                        ::sallyport_core::__private::ActionSpec::new(
                            "get_invoice",
                            ::sallyport_core::__private::EffectClass::Observe
                        )
                        .with_description("Read one invoice.")
                        .with_summary("Read one invoice.")
                        .with_data_class(::sallyport_core::__private::DataClass::new("financial"))
                        .with_scope_tag("invoice_id", "invoice")
                        .with_target(::sallyport_core::__private::Target::Http(
                            ::sallyport_core::__private::HttpTarget::new(
                                ::sallyport_core::__private::HttpMethod::Get,
                                "/v1/invoices/{invoice_id}"
                            )
                            .with_status(404u16, ::sallyport_core::__private::Status::Rejected)
                        ))
                    }
                    fn scope_values(&self) -> ::sallyport_core::__private::Vec<::sallyport_core::__private::ScopedValue> {
                        let mut __values = ::sallyport_core::__private::Vec::new();
                        ::sallyport_core::__private::scope_values_of::<String>("invoice", "invoice_id", &self.invoice_id, &mut __values);
                        __values
                    }
                }
            };
        };
        assert_eq!(expand_to_string(&input), expected.to_string());
    }

    #[test]
    fn any_mistake_fails_the_whole_derive() {
        let input: DeriveInput = parse_quote! {
            /// Read one invoice.
            #[action(name = "get_invoice", effect = observe, consent = never)]
            struct GetInvoice {}
        };
        let error = derive(&input).expect_err("an unknown consent rule");
        assert_eq!(
            error.to_string(),
            "unknown consent rule `never`; expected one of `none`, `session`, `per_call`"
        );
    }

    #[test]
    fn policy_fields_are_named_on_the_card_by_their_json_name() {
        let input: DeriveInput = parse_quote! {
            /// Create one invoice.
            #[action(name = "create_invoice", effect = reversible_change)]
            struct CreateInvoice {
                #[policy] #[serde(rename = "amountCents")] amount_cents: u64,
                customer_id: String,
            }
        };
        let expanded = expand_to_string(&input);
        assert!(
            expanded.contains(&quote!(.with_policy_field("amountCents")).to_string()),
            "{expanded}"
        );
        assert_eq!(
            expanded.matches("with_policy_field").count(),
            1,
            "{expanded}"
        );
    }
}
