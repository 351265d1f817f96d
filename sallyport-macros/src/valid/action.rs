//! The rules inside `#[action]`, and the action-name rule that scope kinds share.

use crate::attr::{Effect, Errors, Input, Keyword, Method, Personal, Retry, TargetKind};

/// The rules inside `#[action]`.
pub(super) fn check_action(input: &Input, errs: &mut Errors) {
    let action = &input.action;
    if let Some(name) = action.name.get()
        && let Err(reason) = check_action_name(&name.value())
    {
        errs.at(name.span(), format!("invalid action name {reason}"));
    }
    let effect = action.effect.get().map(|kw| kw.value);
    if let (Some(effect), Some(consent)) = (effect, action.consent.get()) {
        let floor = effect.consent_floor();
        if consent.value < floor {
            errs.at(
                consent.ident.span(),
                format!(
                    "consent `{}` is below the floor for `{}` actions; use `consent = {}` or \
                     leave `consent` out to get it by default",
                    consent.value.name(),
                    effect.name(),
                    floor.name()
                ),
            );
        }
    }
    if let (Some(effect), Some(retry)) = (effect, action.retry.get())
        && retry.value == Retry::Safe
        && effect != Effect::Observe
    {
        errs.at(
            retry.ident.span(),
            format!(
                "`retry = safe` is only for `observe` actions, and this one is `{}`; use \
                 `retry = idempotency_key` if the server honours idempotency keys, or leave \
                 `retry` out (`never`)",
                effect.name()
            ),
        );
    }
    if let Some(reconcile) = action.reconcile.get() {
        let value = reconcile.value();
        if let Err(reason) = check_action_name(&value) {
            errs.at(
                reconcile.span(),
                format!("`reconcile` must name an action: invalid action name {reason}"),
            );
        } else if action.name.get().is_some_and(|name| name.value() == value) {
            errs.at(
                reconcile.span(),
                format!(
                    "`reconcile = \"{value}\"` names this action itself; name the read-only \
                     action that tells whether a call took effect"
                ),
            );
        }
    }
    if let Some(credential) = action.credential.get() {
        let value = credential.value();
        if value.trim().is_empty() || value.trim() != value {
            errs.at(
                credential.span(),
                "the credential name must be non-empty, without surrounding spaces; it is the \
                 name of a credential in the vault",
            );
        }
    }
    if let Some(classes) = action.data.get() {
        let mut seen = Vec::new();
        for class in classes {
            let name = class.to_string();
            if seen.contains(&name) {
                errs.at(class.span(), format!("data class `{name}` is listed twice"));
            } else {
                seen.push(name);
            }
        }
    }
    check_personal_data(action, errs);
    if let Some(summary) = action.summary.get() {
        let value = summary.value();
        if value.trim().is_empty() || value.contains('\n') {
            errs.at(summary.span(), "the summary must be one non-empty line");
        }
    }
    check_method_override(input, errs);
    for (key, text) in [("scope", &action.scope), ("returns", &action.returns)] {
        if let Some(text) = text.get()
            && text.value().trim().is_empty()
        {
            errs.at(
                text.span(),
                format!("`{key}` must not be empty; leave it out instead"),
            );
        }
    }
}

/// An `observe` action on an HTTP method meant to change state is a contradiction: refused
/// unless `method_override = "…"` gives the reviewed reason it only reads. An override needs
/// a reason, and a contradiction to override.
fn check_method_override(input: &Input, errs: &mut Errors) {
    let action = &input.action;
    let effect = action.effect.get().map(|kw| kw.value);
    let method = match input.target.as_ref().map(|target| &target.kind) {
        Some(TargetKind::Http(http)) => http
            .method
            .get()
            .map(|(method, _)| *method)
            .zip(http.method.key.as_ref()),
        _ => None,
    };
    let contradiction =
        method.filter(|(method, _)| *method != Method::Get && effect == Some(Effect::Observe));
    match (contradiction, action.method_override.get()) {
        (Some((method, key)), None) => {
            let upper = method.name().to_ascii_uppercase();
            errs.at(
                key.span(),
                format!(
                    "`effect = observe` contradicts `{}`, a method meant to change state; \
                     declare the effect this action has, or, if it really only reads, give the \
                     reviewed reason in #[action]: `method_override = \"why this {upper} only \
                     reads\"`",
                    method.name()
                ),
            );
        }
        (Some(_), Some(reason)) if reason.value().trim().is_empty() => errs.at(
            reason.span(),
            "`method_override` needs the reviewed reason this action only reads; it is shown \
             on the action's card",
        ),
        (None, Some(reason)) => errs.at(
            reason.span(),
            "`method_override` is only for an `observe` action on `post`, `put`, `patch` or \
             `delete`; this action has no such contradiction, so remove it",
        ),
        _ => {}
    }
}

/// Action names: lowercase snake case, starting with a letter, at most 64 characters, no
/// trailing or doubled `_` (mirrors `sallyport_core::action::is_valid_action_name`). The
/// error is the rest of a message that starts with "invalid action name ".
pub(super) fn check_action_name(name: &str) -> Result<(), String> {
    let problem = if name.is_empty() {
        Some("it is empty".to_owned())
    } else if name.len() > 64 {
        Some(format!("it has {} characters", name.len()))
    } else if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        Some(format!(
            "it starts with `{}`",
            name.chars().next().unwrap_or_default()
        ))
    } else if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_'))
    {
        Some(format!("it contains `{bad}`"))
    } else if name.contains("__") {
        Some("it contains `__`".to_owned())
    } else if name.ends_with('_') {
        Some("it ends with `_`".to_owned())
    } else {
        None
    };
    let Some(problem) = problem else {
        return Ok(());
    };
    let mut message = format!(
        "`{name}`: {problem}; action names are lowercase snake case, start with a letter and \
         have at most 64 characters"
    );
    let suggestion = snake_case(name);
    if suggestion != name && check_action_name(&suggestion).is_ok() {
        message = format!("{message}, such as `{suggestion}`");
    }
    Err(message)
}

/// `CreateDeployment` and `create-deployment` → `create_deployment`.
pub(super) fn snake_case(name: &str) -> String {
    let mut out = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            if c.is_ascii_uppercase() && previous_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
            previous_lower = false;
        }
    }
    let trimmed = out.trim_matches('_');
    trimmed
        .get(..64)
        .unwrap_or(trimmed)
        .trim_end_matches('_')
        .to_owned()
}

/// `personal_data = [...]`: known kinds, each detectable, each once.
fn check_personal_data(action: &crate::attr::ActionAttr, errs: &mut Errors) {
    let Some(kinds) = action.personal_data.get() else {
        return;
    };
    let mut seen = Vec::new();
    for kind in kinds {
        let name = kind.to_string();
        match <Personal as Keyword>::from_name(&name) {
            None => errs.at(kind.span(), Personal::unknown(&name, true)),
            Some(k) if !k.detectable() => errs.at(
                kind.span(),
                format!(
                    "`{name}` cannot be detected in free text: mark the result field that \
                     holds it with `#[sensitive({name})]` instead"
                ),
            ),
            Some(_) if seen.contains(&name) => {
                errs.at(kind.span(), format!("`{name}` is listed twice"));
            }
            Some(_) => seen.push(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_names_follow_the_core_rule() {
        for good in ["a", "get_invoice2", &"a".repeat(64)] {
            assert_eq!(check_action_name(good), Ok(()), "{good}");
        }
        assert_eq!(
            check_action_name("Create-Deployment"),
            Err(
                "`Create-Deployment`: it starts with `C`; action names are lowercase snake \
                 case, start with a letter and have at most 64 characters, such as \
                 `create_deployment`"
                    .to_owned()
            )
        );
        for bad in [
            "",
            "_x",
            "x_",
            "a__b",
            "9lives",
            "create-thing",
            &"a".repeat(65),
        ] {
            assert!(check_action_name(bad).is_err(), "{bad:?} should be invalid");
        }
    }

    fn errors_of(input: &syn::DeriveInput) -> Vec<String> {
        crate::valid::tests::errors(input)
    }

    #[test]
    fn an_observe_action_on_a_changing_method_needs_a_reviewed_override() {
        let refused: syn::DeriveInput = syn::parse_quote! {
            /// Look one repository up.
            #[action(name = "look_up", effect = observe)]
            #[http(delete = "/repos/{repo}", result = ())]
            struct LookUp { repo: String }
        };
        assert_eq!(
            errors_of(&refused),
            [
                "`effect = observe` contradicts `delete`, a method meant to change state; \
                 declare the effect this action has, or, if it really only reads, give the \
                 reviewed reason in #[action]: `method_override = \"why this DELETE only \
                 reads\"`"
            ]
        );
        let reviewed: syn::DeriveInput = syn::parse_quote! {
            /// Search the issues.
            #[action(name = "search", effect = observe,
                     method_override = "the search endpoint takes its query as a POST body")]
            #[http(post = "/search", result = ())]
            struct Search { q: String }
        };
        assert_eq!(errors_of(&reviewed), Vec::<String>::new());
        let empty: syn::DeriveInput = syn::parse_quote! {
            /// Search the issues.
            #[action(name = "search", effect = observe, method_override = " ")]
            #[http(post = "/search", result = ())]
            struct Search { q: String }
        };
        assert_eq!(
            errors_of(&empty),
            [
                "`method_override` needs the reviewed reason this action only reads; it is \
                 shown on the action's card"
            ]
        );
        let needless: syn::DeriveInput = syn::parse_quote! {
            /// Create one issue.
            #[action(name = "create_issue", effect = reversible_change,
                     method_override = "it creates")]
            #[http(post = "/issues", result = ())]
            struct CreateIssue { title: String }
        };
        assert_eq!(
            errors_of(&needless),
            [
                "`method_override` is only for an `observe` action on `post`, `put`, `patch` \
                 or `delete`; this action has no such contradiction, so remove it"
            ]
        );
    }

    #[test]
    fn struct_names_become_snake_case_suggestions() {
        assert_eq!(
            snake_case("CreatePreviewDeployment"),
            "create_preview_deployment"
        );
        assert_eq!(snake_case("create-thing"), "create_thing");
        assert_eq!(snake_case("_x"), "x");
        assert_eq!(snake_case("HTTPGet2"), "httpget2");
    }
}
