//! The struct's doc comment: the description and its one-line summary.

use syn::{Attribute, Error, Expr, ExprLit, Lit, Meta};

use super::ast::Doc;
use super::errors::Errors;

/// Reads the struct's doc comment. `None` when there is none, or it is blank.
pub(super) fn parse_doc(attrs: &[Attribute], errs: &mut Errors) -> Option<Doc> {
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
fn first_sentence(text: &str) -> String {
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
