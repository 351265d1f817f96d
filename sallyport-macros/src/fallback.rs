//! The stub impl emitted next to the errors when a derive fails (thiserror's `fallback.rs`,
//! clap's `dummies.rs`): code that uses the type as an action then compiles, so the author sees
//! the derive's errors and not a second wave from every use site.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{DeriveInput, parse_quote};

use crate::expand::call_site_ident;

/// The errors as `compile_error!`s, plus an `Action` impl whose `spec` is never run (the crate
/// does not compile).
pub(crate) fn expand(input: &DeriveInput, error: &syn::Error) -> TokenStream {
    let p = quote!(::sallyport_core::__private);
    let ident = call_site_ident(&input.ident);
    let mut generics = input.generics.clone();
    let (_, ty_generics, _) = input.generics.split_for_impl();
    // The supertraits hold by assumption, so a struct that also lacks `Deserialize` or
    // `JsonSchema` adds no error here. The binder keeps the bound from being a trivial one,
    // which stable Rust would check (https://github.com/rust-lang/rust/issues/48214).
    generics.make_where_clause().predicates.push(parse_quote! {
        for<'__workaround> #ident #ty_generics: #p::DeserializeOwned
            + #p::JsonSchema
            + ::core::marker::Send
            + ::core::marker::Sync
            + 'static
    });
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    let error = error.to_compile_error();
    quote! {
        #error

        const _: () = {
            #[automatically_derived]
            impl #impl_generics #p::Action for #ident #ty_generics #where_clause {
                const NAME: &'static str = "";
                type Output = #p::serde_json::Value;
                fn spec() -> #p::ActionSpec {
                    ::core::unreachable!()
                }
            }
        };
    }
}
