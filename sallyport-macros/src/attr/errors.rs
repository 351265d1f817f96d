//! Error accumulation (serde's `Ctxt`) and the wording shared by every message: lists of
//! expected names and the nearest name to a typo.

use proc_macro2::Span;
use syn::ext::IdentExt as _;
use syn::{Error, Ident};

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

pub(super) fn unknown_key(key: &Ident, attr: &str, known: &[&str]) -> Error {
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
