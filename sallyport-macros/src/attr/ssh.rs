//! `#[ssh(...)]` on the struct.

use syn::ext::IdentExt as _;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::{Attribute, Error, LitStr, Token, bracketed, token};

use super::ast::SshAttr;
use super::errors::{Errors, unknown_key};
use super::parse::{expect_eq, parse_code, parse_duration, parse_list, parse_number, parse_str};

pub(super) const SSH_KEYS: &[&str] = &["host", "argv", "exit", "timeout", "output_cap"];

pub(super) fn parse_ssh(attr: &Attribute, errs: &mut Errors) -> SshAttr {
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
            "timeout" => {
                let value = parse_duration(input, &key, "30s", 1, false);
                ssh.timeout.set(key, "ssh", value)
            }
            "output_cap" => {
                let value = parse_number(input, &key, "65536", 1..=u64::from(u32::MAX), "");
                ssh.output_cap.set(key, "ssh", value)
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
