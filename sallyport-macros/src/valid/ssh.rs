//! `#[ssh(...)]`: the host, the argv template and its exit rules, and the fields marked
//! `#[ssh(allow_leading_dash)]`.

use syn::Error;

use crate::attr::{Errors, Input, SshAttr, TargetKind};

use super::check_codes;
use super::names::{FieldNames, check_note_not_sent, check_template, placeholders};

pub(super) fn check_ssh(ssh: &SshAttr, path: &syn::Path, fields: &FieldNames, errs: &mut Errors) {
    match ssh.host.get() {
        Some(host) => {
            let value = host.value();
            match placeholders(&value) {
                Ok(names) if names.is_empty() => {
                    if value.trim().is_empty() {
                        errs.at(host.span(), "the host must name an inventory host");
                    }
                }
                Ok(names) if names.len() == 1 && value == format!("{{{}}}", names[0]) => {
                    for (name, field) in check_template(host, "host", fields, errs) {
                        if field.is_some_and(|field| field.scope.is_none()) {
                            errs.at(
                                host.span(),
                                format!(
                                    "the host comes from field `{name}`, which has no scope \
                                     tag; add `#[scope(host)]` to it so the executor checks \
                                     it against the session's hosts"
                                ),
                            );
                        }
                    }
                }
                Ok(_) => errs.at(
                    host.span(),
                    format!(
                        "the host `{value}` mixes text and placeholders; write an inventory host \
                         name, or exactly one `{{field}}` tagged `#[scope(host)]`"
                    ),
                ),
                Err(message) => errs.at(host.span(), message),
            }
        }
        None if ssh.host.key.is_none() => errs.push(Error::new_spanned(
            path,
            "missing `host` in #[ssh]; add `host = \"inventory-name\"`",
        )),
        None => {}
    }
    match ssh.argv.get() {
        Some(argv) => match argv.first() {
            None => {
                if let Some(key) = &ssh.argv.key {
                    errs.at(
                        key.span(),
                        "`argv` is empty; it needs at least the program to run",
                    );
                }
            }
            Some(program) => {
                if placeholders(&program.value()).is_ok_and(|names| !names.is_empty()) {
                    errs.at(
                        program.span(),
                        "the program (`argv[0]`) must be fixed, never taken from the agent's input",
                    );
                }
                for arg in argv {
                    for (name, _) in check_template(arg, "argv", fields, errs) {
                        check_note_not_sent(&name, "argv", arg.span(), fields, errs);
                    }
                }
            }
        },
        None if ssh.argv.key.is_none() => errs.push(Error::new_spanned(
            path,
            "missing `argv` in #[ssh]; add `argv = [\"program\", \"arg\", …]`",
        )),
        None => {}
    }
    check_codes(&ssh.exits, "exit", errs);
    for rule in &ssh.exits {
        if let Some(form) = &rule.result {
            errs.at(
                form.span(),
                "an exit rule maps an exit code to a status; the result of an `#[ssh]` action is \
                 always the command's output, so remove the parenthesized result",
            );
        }
    }
}

/// `#[ssh(allow_leading_dash)]` fields: only on an `#[ssh]` action, and only on a field its
/// argv template places (anywhere else the attribute would promise something it cannot do).
pub(super) fn check_leading_dash(input: &Input, errs: &mut Errors) {
    let Some(TargetKind::Ssh(ssh)) = input.target.as_ref().map(|target| &target.kind) else {
        for field in &input.fields {
            if let Some(span) = field.allow_leading_dash {
                errs.at(
                    span,
                    format!(
                        "`allow_leading_dash` on field `{}` applies only to an action with an \
                         `#[ssh(...)]` target, whose argv the value becomes part of",
                        field.ident
                    ),
                );
            }
        }
        return;
    };
    // Without an argv `check_ssh` has already reported it.
    let Some(argv) = ssh.argv.get() else { return };
    let mut placed: Vec<String> = Vec::new();
    for arg in argv {
        if let Ok(names) = placeholders(&arg.value()) {
            placed.extend(names.into_iter().map(str::to_owned));
        }
    }
    for field in &input.fields {
        let Some(span) = field.allow_leading_dash else {
            continue;
        };
        if !placed.contains(&field.json_name) {
            errs.at(
                span,
                format!(
                    "field `{}` is not a `{{{}}}` placeholder in the argv template, so \
                     `allow_leading_dash` would have no effect; remove it",
                    field.ident, field.json_name
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use syn::{DeriveInput, parse_quote};

    use crate::valid::tests::errors;

    #[test]
    fn ssh_hosts_from_fields_must_be_scoped_and_the_program_fixed() {
        let input: DeriveInput = parse_quote! {
            /// Restart a unit.
            #[action(name = "restart_unit", effect = reversible_change)]
            #[ssh(host = "{server}", argv = ["{unit}", "restart"], exit(3) = pending, exit(3) = unknown)]
            struct RestartUnit { server: String, unit: String }
        };
        assert_eq!(
            errors(&input),
            [
                "the host comes from field `server`, which has no scope tag; add \
                 `#[scope(host)]` to it so the executor checks it against the session's hosts",
                "the program (`argv[0]`) must be fixed, never taken from the agent's input",
                "`exit(3)` is mapped twice",
            ]
        );
    }
}
