//! Rendering an argv template into the one command string SSH carries.
//!
//! SSH has no argv: the exec request carries one string, which the remote user's login shell
//! parses. Every element that holds a value from the call is therefore single-quoted, with
//! embedded `'` written as `'\''`, so a POSIX shell (sh, dash, bash, ksh, zsh) hands it to the
//! program as exactly one literal argument: `;`, `$( )`, backticks, quotes, globs, spaces and
//! newlines stay bytes. NUL cannot be carried at all (the shell would cut the argument), so a
//! value with NUL is refused before consent. Non-UTF-8 bytes cannot reach here: arguments
//! arrive as JSON strings, which are Unicode.
//!
//! Quoting keeps a value from becoming shell syntax, not from becoming an option: `tar` reads
//! `--checkpoint-action=exec=sh` as one whatever the quotes. So an element whose first
//! character comes from a value that begins with `-` is refused, unless a literal `--`
//! element comes before it in the template (the end of options for getopt-style programs) or
//! the action allows a leading dash for that field
//! ([`SshTarget::with_leading_dash_allowed`](sallyport_core::target::SshTarget::with_leading_dash_allowed)).

use std::borrow::Cow;

use serde_json::Value;

/// A rendered command: what goes on the wire and what the human is shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rendered {
    /// The exec request's command string.
    pub(crate) wire: String,
    /// The same command for display: identical, except values with control characters are
    /// shown in `$'…'` form so a newline cannot fake a line of the consent prompt.
    pub(crate) display: String,
}

/// Why a template could not be rendered. The message is safe to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RenderError(pub(crate) String);

/// Renders `argv` with values from `arguments`. `dash_allowed` names the fields whose value
/// may begin with `-` before a `--` element.
pub(crate) fn render(
    argv: &[Cow<'static, str>],
    arguments: &Value,
    dash_allowed: &[Cow<'static, str>],
) -> Result<Rendered, RenderError> {
    if argv.is_empty() {
        return Err(RenderError(
            "the action's argv template is empty".to_owned(),
        ));
    }
    let program = &argv[0];
    let mut wire = Vec::with_capacity(argv.len());
    let mut display = Vec::with_capacity(argv.len());
    let mut after_end_of_options = false;
    for (index, template) in argv.iter().enumerate() {
        let element = substitute(template, arguments, index)?;
        if let Some(field) = &element.leading_field
            && element.text.starts_with('-')
            && !after_end_of_options
            && !dash_allowed.iter().any(|allowed| allowed == field)
        {
            return Err(RenderError(format!(
                "field `{field}` begins with `-`, so `{program}` could read it as an option \
                 rather than a value; send a value that does not begin with `-` (the action \
                 accepts one only after a `--` in its argv template, or when it allows a \
                 leading dash for this field)"
            )));
        }
        if !element.substituted && element.text == "--" {
            after_end_of_options = true;
        }
        if element.substituted || !is_plain(&element.text) {
            wire.push(quote(&element.text));
            display.push(quote_for_display(&element.text));
        } else {
            wire.push(element.text.clone());
            display.push(element.text);
        }
    }
    Ok(Rendered {
        wire: wire.join(" "),
        display: display.join(" "),
    })
}

/// Resolves a host template: a literal name, or `{field}` naming a string argument.
pub(crate) fn render_host(template: &str, arguments: &Value) -> Result<String, RenderError> {
    Ok(substitute(template, arguments, usize::MAX)?.text)
}

/// One template element after its placeholders were expanded.
struct Element {
    text: String,
    /// Whether any placeholder was expanded.
    substituted: bool,
    /// The field whose value supplied the element's first character, if one did.
    leading_field: Option<String>,
}

/// Expands the placeholders of one element; `{{` and `}}` are literal braces.
fn substitute(template: &str, arguments: &Value, index: usize) -> Result<Element, RenderError> {
    let place = || {
        if index == usize::MAX {
            "the host template".to_owned()
        } else {
            format!("argv element {index}")
        }
    };
    let mut out = String::with_capacity(template.len());
    let mut substituted = false;
    let mut leading_field = None;
    let mut chars = template.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|&(_, n)| n) == Some('{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek().map(|&(_, n)| n) == Some('}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                let rest = &template[at + 1..];
                let Some(end) = rest.find('}') else {
                    return Err(RenderError(format!("{} has an unclosed `{{`", place())));
                };
                let field = &rest[..end];
                if !is_field_name(field) {
                    return Err(RenderError(format!(
                        "{} has an invalid placeholder `{{{field}}}`",
                        place()
                    )));
                }
                let value = value_of(field, arguments)?;
                if out.is_empty() && !value.is_empty() {
                    leading_field = Some(field.to_owned());
                }
                out.push_str(&value);
                substituted = true;
                for _ in 0..=field.chars().count() {
                    chars.next();
                }
            }
            '}' => {
                return Err(RenderError(format!("{} has a stray `}}`", place())));
            }
            c => out.push(c),
        }
    }
    Ok(Element {
        text: out,
        substituted,
        leading_field,
    })
}

fn is_field_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn value_of(field: &str, arguments: &Value) -> Result<String, RenderError> {
    let value = match arguments.get(field) {
        None | Some(Value::Null) => {
            return Err(RenderError(format!("field `{field}` has no value")));
        }
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Array(_) | Value::Object(_)) => {
            return Err(RenderError(format!(
                "field `{field}` is not a string, number or boolean, so it cannot be one argument"
            )));
        }
    };
    if value.contains('\0') {
        return Err(RenderError(format!(
            "field `{field}` contains a NUL character, which a remote argument cannot carry"
        )));
    }
    Ok(value)
}

/// Characters a POSIX shell never treats specially in an unquoted word (`=` and `~` are left
/// out: zsh and others expand them at the start of a word).
fn is_plain(word: &str) -> bool {
    !word.is_empty()
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '_' | '-' | '.' | '/' | ':' | ',' | '+' | '@' | '%')
        })
}

/// Single-quotes `word` for a POSIX shell.
pub(crate) fn quote(word: &str) -> String {
    let mut out = String::with_capacity(word.len() + 2);
    out.push('\'');
    for c in word.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// Like [`quote`], but a word with control characters is shown in bash's `$'…'` form.
fn quote_for_display(word: &str) -> String {
    if !word.chars().any(char::is_control) {
        return quote(word);
    }
    let mut out = String::from("$'");
    for c in word.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if c.is_control() => {
                let mut buf = [0u8; 4];
                for byte in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\x{byte:02x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn argv(parts: &[&'static str]) -> Vec<Cow<'static, str>> {
        parts.iter().map(|p| Cow::Borrowed(*p)).collect()
    }

    fn render(argv: &[Cow<'static, str>], arguments: &Value) -> Result<Rendered, RenderError> {
        super::render(argv, arguments, &[])
    }

    #[test]
    fn literal_words_stay_bare_and_values_are_always_quoted() {
        let r = render(
            &argv(&["systemctl", "restart", "{unit}"]),
            &json!({"unit": "nginx"}),
        )
        .unwrap();
        assert_eq!(r.wire, "systemctl restart 'nginx'");
        assert_eq!(r.display, r.wire);
    }

    #[test]
    fn quotes_newlines_and_substitutions_are_quoted_as_one_word() {
        let r = render(
            &argv(&["echo", "--unit={unit}", "{{x}}"]),
            &json!({"unit": "a'b\n$(id)"}),
        )
        .unwrap();
        assert_eq!(r.wire, "echo '--unit=a'\\''b\n$(id)' '{x}'");
        assert_eq!(r.display, "echo $'--unit=a\\'b\\n$(id)' '{x}'");
    }

    #[test]
    fn nul_missing_and_structured_values_are_refused() {
        let t = argv(&["echo", "{v}"]);
        assert_eq!(
            render(&t, &json!({"v": "a\u{0}b"})).unwrap_err().0,
            "field `v` contains a NUL character, which a remote argument cannot carry"
        );
        assert_eq!(
            render(&t, &json!({})).unwrap_err().0,
            "field `v` has no value"
        );
        assert_eq!(
            render(&t, &json!({"v": ["a", "b"]})).unwrap_err().0,
            "field `v` is not a string, number or boolean, so it cannot be one argument"
        );
        assert_eq!(
            render(&argv(&["echo", "{v"]), &json!({})).unwrap_err().0,
            "argv element 1 has an unclosed `{`"
        );
    }

    #[test]
    fn a_value_that_would_begin_an_option_is_refused() {
        let refused = |field: &str, program: &str| {
            format!(
                "field `{field}` begins with `-`, so `{program}` could read it as an option \
                 rather than a value; send a value that does not begin with `-` (the action \
                 accepts one only after a `--` in its argv template, or when it allows a \
                 leading dash for this field)"
            )
        };
        let tar = argv(&["tar", "-cf", "/tmp/out.tar", "{file}"]);
        let exploit = json!({"file": "--checkpoint-action=exec=sh"});
        assert_eq!(
            render(&tar, &exploit).unwrap_err().0,
            refused("file", "tar")
        );
        // A negative number is a leading dash too (`kill -1` signals every process).
        let kill = argv(&["kill", "{pid}"]);
        assert_eq!(
            render(&kill, &json!({"pid": -1})).unwrap_err().0,
            refused("pid", "kill")
        );
        // The value that supplies the first character is the one checked.
        let joined = argv(&["echo", "{a}{b}"]);
        assert_eq!(
            render(&joined, &json!({"a": "", "b": "-n"})).unwrap_err().0,
            refused("b", "echo")
        );
        assert_eq!(
            render(&joined, &json!({"a": "x", "b": "-n"})).unwrap().wire,
            "echo 'x-n'"
        );
    }

    #[test]
    fn a_leading_dash_passes_after_a_literal_double_dash_or_when_the_field_allows_it() {
        let refused = |field: &str, program: &str| {
            format!(
                "field `{field}` begins with `-`, so `{program}` could read it as an option \
                 rather than a value; send a value that does not begin with `-` (the action \
                 accepts one only after a `--` in its argv template, or when it allows a \
                 leading dash for this field)"
            )
        };
        let after = argv(&["tar", "-cf", "/tmp/out.tar", "--", "{file}"]);
        let exploit = json!({"file": "--checkpoint-action=exec=sh"});
        assert_eq!(
            render(&after, &exploit).unwrap().wire,
            "tar -cf /tmp/out.tar -- '--checkpoint-action=exec=sh'"
        );
        // A `--` that came from a value does not end the options.
        let from_value = argv(&["tar", "{sep}", "{file}"]);
        let sep = [Cow::Borrowed("sep")];
        assert_eq!(
            super::render(&from_value, &json!({"sep": "--", "file": "-x"}), &sep)
                .unwrap_err()
                .0,
            refused("file", "tar")
        );
        // A template's own leading dash is the author's, not the agent's.
        let own = argv(&["systemctl", "--unit={unit}"]);
        assert_eq!(
            render(&own, &json!({"unit": "-x"})).unwrap().wire,
            "systemctl '--unit=-x'"
        );
        let grep = argv(&["grep", "{pattern}", "/var/log/syslog"]);
        let allowed = [Cow::Borrowed("pattern")];
        assert_eq!(
            super::render(&grep, &json!({"pattern": "-e"}), &allowed)
                .unwrap()
                .wire,
            "grep '-e' /var/log/syslog"
        );
    }

    #[test]
    fn numbers_and_empty_strings_render_as_single_arguments() {
        let r = render(
            &argv(&["kill", "-s", "{sig}", "{pid}", "{e}"]),
            &json!({"sig": "TERM", "pid": 42, "e": ""}),
        )
        .unwrap();
        assert_eq!(r.wire, "kill -s 'TERM' '42' ''");
    }

    #[test]
    fn host_templates_take_the_named_field() {
        assert_eq!(
            render_host("{host}", &json!({"host": "web2"})).unwrap(),
            "web2"
        );
        assert_eq!(render_host("web1", &json!({})).unwrap(), "web1");
    }
}
