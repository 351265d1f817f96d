//! Personal data by declaration: what of a person's data an answer may hand the agent.
//!
//! A result type marks the fields that hold personal data with `#[derive(Sensitive)]` and
//! `#[sensitive(…)]`, and says what the agent gets of each:
//!
//! ```
//! use sallyport_core::Sensitive;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Sensitive, Serialize, Deserialize, schemars::JsonSchema)]
//! struct Customer {
//!     id: String,
//!     /// `j***@example.com`
//!     #[sensitive(email)]
//!     email: String,
//!     /// Removed from the answer (the type still reads without it).
//!     #[sensitive(card, drop)]
//!     card: Option<String>,
//!     /// Handed over as it is, and listed on the card as personal data.
//!     #[sensitive(phone, keep)]
//!     phone: String,
//!     /// Free text: an email address, card number or IBAN in it is masked where it stands.
//!     #[sensitive(detect(email, card, iban))]
//!     notes: String,
//! }
//!
//! use sallyport_core::sensitive::{Handling, PersonalKind, Sensitive as _};
//! let fields = Customer::sensitive_fields();
//! assert_eq!(fields[0].at, "/email");
//! assert_eq!(fields[0].kinds, [PersonalKind::Email]);
//! assert_eq!(fields[1].handling, Handling::Drop);
//! ```
//!
//! `#[derive(Action)]` reads the declarations of its `result = Type` (and of the types its
//! fields hold, through `Vec`, `Option`, `Box` and `#[serde(flatten)]`), so an action needs
//! nothing more. An action can also look for personal data in every text the agent reads —
//! its data, its reason, an SSH command's output — with `#[action(personal_data = [email,
//! phone, card, iban])]`.
//!
//! The executor applies both at stage 12 (filter), after the vault's scrubber and before the
//! answer guards of [`crate::inspect`]. Each value masked or dropped is a [`Finding`] of kind
//! `personal_data` (the kind's name as its rule, the JSON pointer, `masked` or `dropped`) in
//! the result and the audit record; never the value. What an action masks is on its card and
//! in its canonical definition, so loosening a mask is drift the baseline sees. An action
//! without declarations costs one check of two empty lists.
//!
//! **Masks** ([`mask`]): an email keeps its first character and its domain
//! (`j***@example.com`); a phone number, card number or national id keeps its last four
//! digits (`**** **** **** 1111`, `***-**-6789`); an IBAN its country code and last four
//! characters; an IPv4 address its first three octets (`203.0.113.*`); a name each word's
//! first letter (`J*** D***`); a birth date its year; an address nothing.
//!
//! **Detection in text** ([`detect`]) finds, bounded by non-alphanumeric characters:
//!
//! | kind | what |
//! |---|---|
//! | `email` | `local@domain.tld`, ASCII, a top-level domain of two or more letters |
//! | `card` | 13–19 digits, alone or in the groups cards are printed in (4-4-4-4, 4-4-4-4-3, 4-6-5, 4-6-4) split by one kind of single space or dash, an issuer's prefix at a length that issuer uses, and a valid Luhn check digit |
//! | `iban` | a country code from the table of 48 countries below, its exact length, optionally in groups of four, and a valid ISO 7064 mod-97 check |
//! | `phone` | `+` and 8–15 digits (spaces, dashes, dots, parentheses between them), or a North American number written `(415) 555-0134`, `415-555-0134` or `415.555.0134` |
//! | `national_id` | a US Social Security number written `123-45-6789`, without the numbers the SSA never issues (area `000`, `666`, `9xx`; group `00`; serial `0000`) |
//! | `ip_address` | an IPv4 address, four octets of 0–255, not part of a longer dotted run |
//!
//! **Not detected:** names, addresses and birth dates (declare the fields that hold them),
//! other countries' national ids, phone numbers written without a `+` outside North
//! America's formats, IPv6 addresses, card numbers split other ways, and anything spelled
//! out or encoded. Luhn and mod-97 leave ordinary numbers alone: order numbers, UUIDs, commit
//! hashes and 16-digit numbers whose check digit is wrong are not masked.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::outcome::ActionResult;
use crate::pointer::{push_index, push_key, segments};
use sallyport_vocab::finding::{Finding, FindingAction, FindingKind};

sallyport_vocab::string_enum! {
    /// A kind of personal data (`#[sensitive(email)]`, `personal_data = [email]`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum PersonalKind {
        /// An email address.
        Email => "email",
        /// A phone number.
        Phone => "phone",
        /// A payment card number.
        Card => "card",
        /// An international bank account number.
        Iban => "iban",
        /// A national identity number (detected in text: a US Social Security number).
        NationalId => "national_id",
        /// An IP address (detected in text: IPv4).
        IpAddress => "ip_address",
        /// A person's name (declared only, never detected).
        Name => "name",
        /// A postal address (declared only, never detected).
        Address => "address",
        /// A date of birth (declared only, never detected).
        BirthDate => "birth_date",
    }
}

impl PersonalKind {
    /// Whether [`detect`] can find this kind in free text. Names, addresses and birth dates
    /// cannot be told from other text: declare the fields that hold them.
    pub const fn detectable(self) -> bool {
        !matches!(self, Self::Name | Self::Address | Self::BirthDate)
    }
}

sallyport_vocab::string_enum! {
    /// What the agent gets of a declared field.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Handling {
        /// The value is masked as its kind says (`j***@example.com`). The default.
        Mask => "mask",
        /// The field is removed from the answer.
        Drop => "drop",
        /// The value is handed over as it is; the card lists it as personal data.
        Keep => "keep",
        /// Free text: every value of the listed kinds found in it is masked where it stands.
        Detect => "detect",
    }
}

/// One declaration of a result type: where, which kinds, and what the agent gets.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SensitiveField {
    /// Where, in the result's data: a JSON pointer (RFC 6901) in which a `*` segment stands
    /// for every item of an array (`/members/*/email`). The empty pointer is the whole data.
    pub at: Cow<'static, str>,
    /// The kinds: the one a declared field holds, or those [`Handling::Detect`] looks for.
    pub kinds: Vec<PersonalKind>,
    /// What the agent gets.
    pub handling: Handling,
}

impl SensitiveField {
    /// A declaration at `at` (a JSON pointer; `*` for every array item).
    pub fn new(
        at: impl Into<Cow<'static, str>>,
        kinds: &[PersonalKind],
        handling: Handling,
    ) -> Self {
        Self {
            at: at.into(),
            kinds: kinds.to_vec(),
            handling,
        }
    }

    /// The same declaration under `prefix` (a JSON pointer): how a type's declarations
    /// become those of the field or collection that holds it.
    #[must_use]
    pub fn under(mut self, prefix: &str) -> Self {
        self.at = Cow::Owned(format!("{prefix}{}", self.at));
        self
    }

    /// One line for the card: `email at /owner/email (masked)`.
    pub(crate) fn describe(&self) -> String {
        let at = if self.at.is_empty() { "/" } else { &self.at };
        let kinds: Vec<&str> = self.kinds.iter().map(|k| k.as_str()).collect();
        match self.handling {
            Handling::Mask => format!("{} at {at} (masked)", kinds.join(", ")),
            Handling::Drop => format!("{} at {at} (dropped)", kinds.join(", ")),
            Handling::Keep => format!("{} at {at} (kept)", kinds.join(", ")),
            Handling::Detect => format!("{} found in {at} (masked)", kinds.join(", ")),
        }
    }
}

/// A result type's personal-data declarations: written by `#[derive(Sensitive)]`, and
/// passed through `Vec`, `Option` and `Box`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` declares no personal data",
    note = "add `#[derive(sallyport_core::Sensitive)]` to the type and mark its fields with `#[sensitive(…)]`"
)]
pub trait Sensitive {
    /// Every declaration, with pointers relative to a value of this type.
    fn sensitive_fields() -> Vec<SensitiveField>;
}

impl<T: Sensitive> Sensitive for Vec<T> {
    fn sensitive_fields() -> Vec<SensitiveField> {
        T::sensitive_fields()
            .into_iter()
            .map(|f| f.under("/*"))
            .collect()
    }
}

impl<T: Sensitive> Sensitive for Option<T> {
    fn sensitive_fields() -> Vec<SensitiveField> {
        T::sensitive_fields()
    }
}

impl<T: Sensitive> Sensitive for Box<T> {
    fn sensitive_fields() -> Vec<SensitiveField> {
        T::sensitive_fields()
    }
}

/// Applies an action's declarations to `result` (stage 12): the declared fields of its
/// data, then `detect_everywhere` in every text the agent reads (`reason`, the data's
/// strings, `next`'s arguments). Appends a [`Finding`] for each value masked or dropped.
/// Public for benchmarks and for a host that shows an answer it got some other way.
pub fn apply(
    fields: &[SensitiveField],
    detect_everywhere: &[PersonalKind],
    result: &mut ActionResult,
) {
    if fields.is_empty() && detect_everywhere.is_empty() {
        return;
    }
    let mut findings = Vec::new();
    if let Some(data) = &mut result.data {
        for field in fields {
            let steps: Vec<String> = segments(&field.at);
            let mut pointer = String::from("/data");
            declared(data, &steps, field, &mut pointer, &mut findings);
        }
    }
    if !detect_everywhere.is_empty() {
        if let Some(reason) = &mut result.reason {
            detect_in_text(reason, detect_everywhere, "/reason", &mut findings);
        }
        if let Some(data) = &mut result.data {
            detect_in_json(
                data,
                detect_everywhere,
                &mut String::from("/data"),
                &mut findings,
            );
        }
        if let Some(next) = &mut result.next {
            detect_in_json(
                &mut next.arguments,
                detect_everywhere,
                &mut String::from("/next/arguments"),
                &mut findings,
            );
        }
    }
    result.findings.extend(findings);
}

/// Walks `value` along `steps` and handles what the declaration names.
fn declared(
    value: &mut Value,
    steps: &[String],
    field: &SensitiveField,
    pointer: &mut String,
    findings: &mut Vec<Finding>,
) {
    let Some((step, rest)) = steps.split_first() else {
        handle(value, field, pointer, findings);
        return;
    };
    let len = pointer.len();
    if step == "*" {
        if let Value::Array(items) = value {
            for (i, item) in items.iter_mut().enumerate() {
                push_index(pointer, i);
                declared(item, rest, field, pointer, findings);
                pointer.truncate(len);
            }
        }
        return;
    }
    let Value::Object(map) = value else { return };
    if rest.is_empty() && field.handling == Handling::Drop {
        if let Some(removed) = map.remove(step.as_str())
            && !removed.is_null()
        {
            push_key(pointer, step);
            for kind in &field.kinds {
                findings.push(finding(*kind, pointer, FindingAction::Dropped));
            }
            pointer.truncate(len);
        }
        return;
    }
    if let Some(inner) = map.get_mut(step.as_str()) {
        push_key(pointer, step);
        declared(inner, rest, field, pointer, findings);
        pointer.truncate(len);
    }
}

/// The declaration's handling of the value it names (`drop` is done by the parent).
fn handle(
    value: &mut Value,
    field: &SensitiveField,
    pointer: &mut String,
    findings: &mut Vec<Finding>,
) {
    match field.handling {
        Handling::Keep => {}
        Handling::Drop => {
            // The whole data is the field: nothing is left.
            if !value.is_null() {
                *value = Value::Null;
                for kind in &field.kinds {
                    findings.push(finding(*kind, pointer, FindingAction::Dropped));
                }
            }
        }
        Handling::Detect => detect_in_json(value, &field.kinds, pointer, findings),
        Handling::Mask => {
            let kind = field
                .kinds
                .first()
                .copied()
                .unwrap_or(PersonalKind::Address);
            mask_json(value, kind, pointer, findings);
        }
    }
}

/// Masks every scalar under `value` as `kind` (a number becomes its masked text).
fn mask_json(
    value: &mut Value,
    kind: PersonalKind,
    pointer: &mut String,
    findings: &mut Vec<Finding>,
) {
    match value {
        Value::String(text) => {
            if !text.is_empty() {
                *text = mask(kind, text);
                findings.push(finding(kind, pointer, FindingAction::Masked));
            }
        }
        Value::Number(n) => {
            *value = Value::String(mask(kind, &n.to_string()));
            findings.push(finding(kind, pointer, FindingAction::Masked));
        }
        Value::Array(items) => {
            let len = pointer.len();
            for (i, item) in items.iter_mut().enumerate() {
                push_index(pointer, i);
                mask_json(item, kind, pointer, findings);
                pointer.truncate(len);
            }
        }
        Value::Object(map) => {
            let len = pointer.len();
            for (k, v) in map.iter_mut() {
                push_key(pointer, k);
                mask_json(v, kind, pointer, findings);
                pointer.truncate(len);
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
}

fn detect_in_json(
    value: &mut Value,
    kinds: &[PersonalKind],
    pointer: &mut String,
    findings: &mut Vec<Finding>,
) {
    match value {
        Value::String(text) => detect_in_text(text, kinds, pointer, findings),
        Value::Array(items) => {
            let len = pointer.len();
            for (i, item) in items.iter_mut().enumerate() {
                push_index(pointer, i);
                detect_in_json(item, kinds, pointer, findings);
                pointer.truncate(len);
            }
        }
        Value::Object(map) => {
            let len = pointer.len();
            for (k, v) in map.iter_mut() {
                push_key(pointer, k);
                detect_in_json(v, kinds, pointer, findings);
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

fn detect_in_text(
    text: &mut String,
    kinds: &[PersonalKind],
    pointer: &str,
    findings: &mut Vec<Finding>,
) {
    let hits = detect(text, kinds);
    if hits.is_empty() {
        return;
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for hit in &hits {
        out.push_str(&text[at..hit.start]);
        out.push_str(&mask(hit.kind, &text[hit.start..hit.end]));
        at = hit.end;
        findings.push(finding(hit.kind, pointer, FindingAction::Masked));
    }
    out.push_str(&text[at..]);
    *text = out;
}

fn finding(kind: PersonalKind, pointer: &str, action: FindingAction) -> Finding {
    Finding::new(FindingKind::PersonalData, kind.as_str(), pointer, action)
}

/// `text` masked as `kind` says (see the [module](self)).
///
/// ```
/// use sallyport_core::sensitive::{mask, PersonalKind};
/// assert_eq!(mask(PersonalKind::Email, "jane.doe@example.com"), "j***@example.com");
/// assert_eq!(mask(PersonalKind::Card, "4111 1111 1111 1111"), "**** **** **** 1111");
/// assert_eq!(mask(PersonalKind::Iban, "DE89 3704 0044 0532 0130 00"), "DE** **** **** **** **30 00");
/// assert_eq!(mask(PersonalKind::NationalId, "123-45-6789"), "***-**-6789");
/// assert_eq!(mask(PersonalKind::Name, "Jane Doe"), "J*** D***");
/// ```
pub fn mask(kind: PersonalKind, text: &str) -> String {
    match kind {
        PersonalKind::Email => match text.rfind('@') {
            Some(at) if at > 0 => {
                let first = text.chars().next().map(String::from).unwrap_or_default();
                format!("{first}***{}", &text[at..])
            }
            _ => "***".to_owned(),
        },
        PersonalKind::Phone | PersonalKind::Card | PersonalKind::NationalId => {
            keep_last(text, 4, 0, |c| c.is_ascii_digit())
        }
        PersonalKind::Iban => keep_last(text, 4, 2, |c| c.is_ascii_alphanumeric()),
        PersonalKind::IpAddress => match text.rfind('.') {
            Some(dot) if !text.contains(':') => format!("{}.*", &text[..dot]),
            _ => "***".to_owned(),
        },
        PersonalKind::Name => text
            .split_whitespace()
            .map(|w| format!("{}***", w.chars().next().unwrap_or('*')))
            .collect::<Vec<_>>()
            .join(" "),
        PersonalKind::BirthDate => {
            let year: String = text.chars().take(4).collect();
            if year.len() == 4 && year.chars().all(|c| c.is_ascii_digit()) {
                let rest: String = text
                    .chars()
                    .skip(4)
                    .map(|c| if c.is_ascii_alphanumeric() { '*' } else { c })
                    .collect();
                format!("{year}{rest}")
            } else {
                "***".to_owned()
            }
        }
        PersonalKind::Address => "***".to_owned(),
    }
}

/// Replaces every character `counts` says with `*`, except the first `head` and the last
/// `tail` of them; other characters (separators) stay. A text with no more than `tail`
/// counted characters is masked whole.
fn keep_last(text: &str, tail: usize, head: usize, counts: impl Fn(char) -> bool) -> String {
    let total = text.chars().filter(|c| counts(*c)).count();
    if total <= tail + head {
        return text
            .chars()
            .map(|c| if counts(c) { '*' } else { c })
            .collect();
    }
    let mut seen = 0;
    text.chars()
        .map(|c| {
            if !counts(c) {
                return c;
            }
            seen += 1;
            if seen <= head || seen > total - tail {
                c
            } else {
                '*'
            }
        })
        .collect()
}

/// One value [`detect`] found: its byte range and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PersonalHit {
    /// Where it starts (a byte offset).
    pub start: usize,
    /// Where it ends (exclusive).
    pub end: usize,
    /// What it is.
    pub kind: PersonalKind,
}

/// Every value of `kinds` in `text` (see the [module](self) for what is found), in text
/// order, without overlaps (the one that starts first wins, and at one place the longest:
/// an IBAN's digits are never also a card number).
pub fn detect(text: &str, kinds: &[PersonalKind]) -> Vec<PersonalHit> {
    let mut found_all: Vec<PersonalHit> = Vec::new();
    let bytes = text.as_bytes();
    for &kind in kinds {
        let found: Vec<(usize, usize)> = match kind {
            PersonalKind::Email => emails(bytes),
            PersonalKind::Card => cards(bytes),
            PersonalKind::Iban => ibans(bytes),
            PersonalKind::Phone => phones(bytes),
            PersonalKind::NationalId => ssns(bytes),
            PersonalKind::IpAddress => ipv4s(bytes),
            PersonalKind::Name | PersonalKind::Address | PersonalKind::BirthDate => Vec::new(),
        };
        found_all.extend(
            found
                .into_iter()
                .map(|(start, end)| PersonalHit { start, end, kind }),
        );
    }
    found_all.sort_by_key(|h| (h.start, std::cmp::Reverse(h.end)));
    let mut hits: Vec<PersonalHit> = Vec::with_capacity(found_all.len());
    for hit in found_all {
        if hits.last().is_none_or(|last| last.end <= hit.start) {
            hits.push(hit);
        }
    }
    hits
}

fn alnum_at(bytes: &[u8], i: usize) -> bool {
    bytes.get(i).is_some_and(u8::is_ascii_alphanumeric)
}

/// Not preceded by a letter or digit.
fn starts_word(bytes: &[u8], i: usize) -> bool {
    i == 0 || !bytes[i - 1].is_ascii_alphanumeric()
}

fn emails(bytes: &[u8]) -> Vec<(usize, usize)> {
    let local = |b: u8| b.is_ascii_alphanumeric() || b"._%+-".contains(&b);
    let domain = |b: u8| b.is_ascii_alphanumeric() || b == b'.' || b == b'-';
    let mut out = Vec::new();
    let mut from = 0;
    for (i, _) in bytes.iter().enumerate().filter(|(_, b)| **b == b'@') {
        if i < from {
            continue;
        }
        let mut start = i;
        while start > from && local(bytes[start - 1]) {
            start -= 1;
        }
        while start < i && !bytes[start].is_ascii_alphanumeric() {
            start += 1;
        }
        let mut end = i + 1;
        while end < bytes.len() && domain(bytes[end]) {
            end += 1;
        }
        while end > i + 1 && !bytes[end - 1].is_ascii_alphanumeric() {
            end -= 1;
        }
        if start == i || end <= i + 1 {
            continue;
        }
        let host = &bytes[i + 1..end];
        let Some(dot) = host.iter().rposition(|b| *b == b'.') else {
            continue;
        };
        let tld = &host[dot + 1..];
        if tld.len() >= 2
            && tld.iter().all(u8::is_ascii_alphabetic)
            && host[0].is_ascii_alphanumeric()
        {
            out.push((start, end));
            from = end;
        }
    }
    out
}

/// Runs of digits in groups split by one separator kind (`seps`), starting where a word
/// starts and ending where one ends: (start, end, the group lengths).
fn digit_groups(bytes: &[u8], seps: &[u8]) -> Vec<(usize, usize, Vec<usize>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() || !starts_word(bytes, i) {
            i += 1;
            continue;
        }
        let start = i;
        let mut groups = Vec::new();
        let mut sep: Option<u8> = None;
        loop {
            let g = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            groups.push(i - g);
            let next = bytes.get(i).copied();
            match next {
                Some(s)
                    if seps.contains(&s)
                        && sep.is_none_or(|k| k == s)
                        && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) =>
                {
                    sep = Some(s);
                    i += 1;
                }
                _ => break,
            }
        }
        if !alnum_at(bytes, i) {
            out.push((start, i, groups));
        }
        while i < bytes.len() && bytes[i].is_ascii_alphanumeric() {
            i += 1;
        }
    }
    out
}

fn digits_of(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .filter(|b| b.is_ascii_digit())
        .map(|b| b - b'0')
        .collect()
}

/// The Luhn check (ISO/IEC 7812-1) over `digits`, check digit last.
pub(crate) fn luhn(digits: &[u8]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            let d = u32::from(d);
            if i % 2 == 1 {
                let twice = d * 2;
                if twice > 9 { twice - 9 } else { twice }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// Whether an issuer uses this prefix at this length: Visa, Mastercard, American Express,
/// Discover, JCB, Diners Club, UnionPay.
fn card_prefix(digits: &[u8]) -> bool {
    let n2 = u32::from(digits[0]) * 10 + u32::from(digits[1]);
    let n4 = n2 * 100 + u32::from(digits[2]) * 10 + u32::from(digits[3]);
    let len = digits.len();
    match n2 {
        40..=49 => matches!(len, 13 | 16 | 19),
        51..=55 => len == 16,
        22..=27 => (2221..=2720).contains(&n4) && len == 16,
        34 | 37 => len == 15,
        30 | 36 | 38 => (14..=19).contains(&len),
        35 | 62 | 65 => (16..=19).contains(&len),
        60 | 64 => (n4 == 6011 || (644..=649).contains(&(n4 / 10))) && (16..=19).contains(&len),
        _ => false,
    }
}

fn cards(bytes: &[u8]) -> Vec<(usize, usize)> {
    digit_groups(bytes, b" -")
        .into_iter()
        .filter(|(start, end, groups)| {
            let digits = digits_of(&bytes[*start..*end]);
            if !(13..=19).contains(&digits.len()) {
                return false;
            }
            // Alone, or in the groups cards are printed in.
            let grouped = groups.len() == 1
                || groups == &[4, 4, 4, 4]
                || groups == &[4, 4, 4, 4, 3]
                || groups == &[4, 6, 5]
                || groups == &[4, 6, 4];
            grouped && card_prefix(&digits) && luhn(&digits)
        })
        .map(|(s, e, _)| (s, e))
        .collect()
}

fn ssns(bytes: &[u8]) -> Vec<(usize, usize)> {
    digit_groups(bytes, b"-")
        .into_iter()
        .filter(|(start, end, groups)| {
            if groups != &[3, 2, 4] {
                return false;
            }
            let d = digits_of(&bytes[*start..*end]);
            let area = u32::from(d[0]) * 100 + u32::from(d[1]) * 10 + u32::from(d[2]);
            area != 0
                && area != 666
                && area < 900
                && (d[3], d[4]) != (0, 0)
                && d[5..] != [0, 0, 0, 0]
        })
        .map(|(s, e, _)| (s, e))
        .collect()
}

fn phones(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    // International: `+` and 8–15 digits.
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'+'
            || !bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
            || (i > 0 && bytes[i - 1].is_ascii_alphanumeric())
        {
            i += 1;
            continue;
        }
        let start = i;
        let mut j = i + 1;
        let mut end = j;
        let mut digits = 0;
        while j < bytes.len() {
            let b = bytes[j];
            if b.is_ascii_digit() {
                digits += 1;
                j += 1;
                end = j;
            } else if b" -.()".contains(&b) {
                // Up to two separators between digits: `) `, ` (`.
                let mut k = j;
                while k < bytes.len() && k - j < 2 && b" -.()".contains(&bytes[k]) {
                    k += 1;
                }
                if !bytes.get(k).is_some_and(u8::is_ascii_digit) {
                    break;
                }
                j = k;
            } else {
                break;
            }
        }
        if (8..=15).contains(&digits) && !alnum_at(bytes, end) {
            out.push((start, end));
        }
        i = end.max(i + 1);
    }
    // North American: (415) 555-0134, 415-555-0134, 415.555.0134.
    let mut i = 0;
    while i < bytes.len() {
        let paren = bytes[i] == b'(';
        if !(paren || bytes[i].is_ascii_digit())
            || !starts_word(bytes, i)
            || (i > 0 && bytes[i - 1] == b'+')
        {
            i += 1;
            continue;
        }
        if let Some(end) = nanp_at(bytes, i, paren)
            && !out.iter().any(|(s, e)| i < *e && *s < end)
        {
            out.push((i, end));
            i = end;
        } else {
            i += 1;
        }
    }
    out.sort_unstable();
    out
}

/// A North American number starting at `i`, its end.
fn nanp_at(bytes: &[u8], i: usize, paren: bool) -> Option<usize> {
    let digits = |at: usize, n: usize| -> bool {
        bytes
            .get(at..at + n)
            .is_some_and(|s| s.iter().all(u8::is_ascii_digit))
    };
    let (after_area, sep) = if paren {
        if !digits(i + 1, 3) || bytes.get(i + 4) != Some(&b')') || bytes.get(i + 5) != Some(&b' ') {
            return None;
        }
        (i + 6, b'-')
    } else {
        let sep = *bytes.get(i + 3)?;
        if !digits(i, 3) || !(sep == b'-' || sep == b'.') {
            return None;
        }
        (i + 4, sep)
    };
    let area_first = bytes[if paren { i + 1 } else { i }];
    if !(b'2'..=b'9').contains(&area_first)
        || !digits(after_area, 3)
        || bytes.get(after_area + 3) != Some(&sep)
        || !digits(after_area + 4, 4)
    {
        return None;
    }
    let end = after_area + 8;
    // Not a longer run of groups (`415-555-0134-77`, `1.2.3.4`).
    let next = bytes.get(end).copied();
    if alnum_at(bytes, end) || (next == Some(sep) && alnum_at(bytes, end + 1)) {
        return None;
    }
    Some(end)
}

fn ipv4s(bytes: &[u8]) -> Vec<(usize, usize)> {
    digit_groups(bytes, b".")
        .into_iter()
        .filter(|(start, end, groups)| {
            groups.len() == 4
                && groups.iter().all(|g| (1..=3).contains(g))
                && bytes[*start..*end].split(|b| *b == b'.').all(|octet| {
                    std::str::from_utf8(octet)
                        .ok()
                        .and_then(|s| s.parse::<u16>().ok())
                        .is_some_and(|n| n <= 255)
                })
                && !(*start > 0 && bytes[*start - 1] == b'.')
                && bytes.get(*end) != Some(&b'.')
        })
        .map(|(s, e, _)| (s, e))
        .collect()
}

/// IBAN lengths by country (ISO 13616 registry).
const IBAN_LENGTHS: &[(&[u8; 2], usize)] = &[
    (b"AD", 24),
    (b"AE", 23),
    (b"AT", 20),
    (b"BE", 16),
    (b"BG", 22),
    (b"BH", 22),
    (b"CH", 21),
    (b"CY", 28),
    (b"CZ", 24),
    (b"DE", 22),
    (b"DK", 18),
    (b"EE", 20),
    (b"ES", 24),
    (b"FI", 18),
    (b"FO", 18),
    (b"FR", 27),
    (b"GB", 22),
    (b"GI", 23),
    (b"GL", 18),
    (b"GR", 27),
    (b"HR", 21),
    (b"HU", 28),
    (b"IE", 22),
    (b"IL", 23),
    (b"IS", 26),
    (b"IT", 27),
    (b"KW", 30),
    (b"KZ", 20),
    (b"LB", 28),
    (b"LI", 21),
    (b"LT", 20),
    (b"LU", 20),
    (b"LV", 21),
    (b"MC", 27),
    (b"MT", 31),
    (b"NL", 18),
    (b"NO", 15),
    (b"PL", 28),
    (b"PT", 25),
    (b"QA", 29),
    (b"RO", 24),
    (b"SA", 24),
    (b"SE", 24),
    (b"SI", 19),
    (b"SK", 24),
    (b"SM", 27),
    (b"TR", 26),
    (b"UA", 29),
];

/// The ISO 7064 mod-97 check of a compact IBAN.
pub(crate) fn iban_valid(compact: &[u8]) -> bool {
    let mut rem: u32 = 0;
    for &b in compact[4..].iter().chain(&compact[..4]) {
        let v = match b {
            b'0'..=b'9' => u32::from(b - b'0'),
            b'A'..=b'Z' => u32::from(b - b'A') + 10,
            _ => return false,
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

fn ibans(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 4 <= bytes.len() {
        let here = &bytes[i..];
        // Two capitals and two digits where a word starts, before the country table.
        if !here[0].is_ascii_uppercase()
            || !here[1].is_ascii_uppercase()
            || !here[2].is_ascii_digit()
            || !here[3].is_ascii_digit()
            || !starts_word(bytes, i)
        {
            i += 1;
            continue;
        }
        let country = [here[0], here[1]];
        let Some(&(_, len)) = IBAN_LENGTHS.iter().find(|(c, _)| **c == country) else {
            i += 1;
            continue;
        };
        let mut compact = Vec::with_capacity(len);
        let mut j = i;
        let mut since_space = 0;
        let mut spaced = false;
        while j < bytes.len() && compact.len() < len {
            let b = bytes[j];
            if b.is_ascii_digit() || b.is_ascii_uppercase() {
                compact.push(b);
                since_space += 1;
                j += 1;
            } else if b == b' '
                && since_space == 4
                && alnum_at(bytes, j + 1)
                && (spaced || compact.len() == 4)
            {
                spaced = true;
                since_space = 0;
                j += 1;
            } else {
                break;
            }
        }
        if compact.len() == len && !alnum_at(bytes, j) && iban_valid(&compact) {
            out.push((i, j));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::AttemptId;
    use crate::outcome::Status;
    use PersonalKind as K;

    fn found(text: &str, kind: PersonalKind) -> Vec<&str> {
        detect(text, &[kind])
            .into_iter()
            .map(|h| &text[h.start..h.end])
            .collect()
    }

    #[test]
    fn each_kind_is_found_and_its_look_alikes_are_not() {
        assert_eq!(
            found("mail jane.doe+x@mail.example.com, now", K::Email),
            ["jane.doe+x@mail.example.com"]
        );
        assert!(found("user@localhost and @handle and a@b.c", K::Email).is_empty());
        assert_eq!(
            found("card 4111 1111 1111 1111 paid", K::Card),
            ["4111 1111 1111 1111"]
        );
        assert_eq!(
            found("amex 3782-822463-10005.", K::Card),
            ["3782-822463-10005"]
        );
        assert_eq!(found("5555555555554444", K::Card), ["5555555555554444"]);
        for control in [
            "4111 1111 1111 1112",
            "order 2024-118734-0001",
            "id 550e8400-e29b-41d4-a716-446655440000",
            "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
            "1234567812345678",
            "4111 1111-1111 1111",
            "12345678-1234-1234-1234-123456789012",
        ] {
            assert!(found(control, K::Card).is_empty(), "{control}");
        }
        assert_eq!(
            found("IBAN DE89 3704 0044 0532 0130 00.", K::Iban),
            ["DE89 3704 0044 0532 0130 00"]
        );
        assert_eq!(
            found("GB82WEST12345698765432", K::Iban),
            ["GB82WEST12345698765432"]
        );
        assert!(found("DE89 3704 0044 0532 0130 01", K::Iban).is_empty());
        // An invalid IBAN's digits are not a card number either (they pass Luhn).
        assert!(found("DE89 3704 0044 0532 0130 01", K::Card).is_empty());
        assert!(luhn(&digits_of(b"370400440532013001")));
        // At one place, the longest wins: a valid IBAN is an IBAN.
        let both = detect("pay DE89 3704 0044 0532 0130 00 now", &[K::Card, K::Iban]);
        assert_eq!(both.len(), 1);
        assert_eq!(both[0].kind, K::Iban);
        assert!(found("DE12 is not, nor XX89370400440532013000", K::Iban).is_empty());
        assert_eq!(
            found("call +1 (415) 555-0134 or +44 20 7946 0958", K::Phone),
            ["+1 (415) 555-0134", "+44 20 7946 0958"]
        );
        assert_eq!(
            found("or (415) 555-0134 or 212.555.0199", K::Phone),
            ["(415) 555-0134", "212.555.0199"]
        );
        for control in [
            "v1.2.3",
            "2024-118-73400",
            "order 2024-118734",
            "123-456-7890-12",
            "+12",
        ] {
            assert!(found(control, K::Phone).is_empty(), "{control}");
        }
        assert_eq!(found("ssn 123-45-6789", K::NationalId), ["123-45-6789"]);
        assert!(
            found(
                "000-12-3456 666-12-3456 912-12-3456 123-00-4567 123-45-0000",
                K::NationalId
            )
            .is_empty()
        );
        assert_eq!(found("from 203.0.113.7:443", K::IpAddress), ["203.0.113.7"]);
        assert!(found("1.2.3.4.5 and 300.1.1.1 and v10.0.0.1a", K::IpAddress).is_empty());
    }

    #[test]
    fn masks_keep_what_identifies_nothing() {
        assert_eq!(mask(K::Phone, "+1 (415) 555-0134"), "+* (***) ***-0134");
        assert_eq!(mask(K::Card, "5555555555554444"), "************4444");
        assert_eq!(mask(K::IpAddress, "203.0.113.7"), "203.0.113.*");
        assert_eq!(mask(K::BirthDate, "1984-02-29"), "1984-**-**");
        assert_eq!(mask(K::Address, "1 Main St"), "***");
        assert_eq!(mask(K::Email, "not-an-email"), "***");
        assert_eq!(mask(K::Card, "123"), "***");
        assert!(luhn(&[4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]));
        assert!(iban_valid(b"GB82WEST12345698765432"));
    }

    #[test]
    fn declared_fields_are_masked_dropped_or_kept_with_a_finding_each() {
        let fields = [
            SensitiveField::new("/owner/email", &[K::Email], Handling::Mask),
            SensitiveField::new("/members/*/card", &[K::Card], Handling::Drop),
            SensitiveField::new("/members/*/phone", &[K::Phone], Handling::Keep),
            SensitiveField::new("/notes", &[K::Email, K::Iban], Handling::Detect),
        ];
        let mut result = ActionResult::new(Status::Completed, "read", AttemptId::generate());
        result.data = Some(serde_json::json!({
            "owner": {"email": "jane@example.com"},
            "members": [
                {"card": "4111111111111111", "phone": "+1 415 555 0134"},
                {"card": null, "phone": "+1 415 555 0135"}
            ],
            "notes": "ask bob@example.org; pay GB82WEST12345698765432; order 2024-118734"
        }));
        apply(&fields, &[], &mut result);
        assert_eq!(
            result.data,
            Some(serde_json::json!({
                "owner": {"email": "j***@example.com"},
                "members": [{"phone": "+1 415 555 0134"}, {"phone": "+1 415 555 0135"}],
                "notes": "ask b***@example.org; pay GB****************5432; order 2024-118734"
            }))
        );
        let seen: Vec<(&str, &str, FindingAction)> = result
            .findings
            .iter()
            .map(|f| (f.rule.as_str(), f.pointer.as_str(), f.action))
            .collect();
        assert_eq!(
            seen,
            [
                ("email", "/data/owner/email", FindingAction::Masked),
                ("card", "/data/members/0/card", FindingAction::Dropped),
                ("email", "/data/notes", FindingAction::Masked),
                ("iban", "/data/notes", FindingAction::Masked),
            ]
        );
        assert!(
            result
                .findings
                .iter()
                .all(|f| f.kind == FindingKind::PersonalData)
        );
    }

    #[test]
    fn detection_everywhere_reaches_the_reason_and_next() {
        let mut result = ActionResult::new(Status::Rejected, "read", AttemptId::generate());
        result.reason = Some("no account for jane@example.com (card 4111-1111-1111-1111)".into());
        apply(&[], &[K::Email, K::Card], &mut result);
        assert_eq!(
            result.reason.as_deref(),
            Some("no account for j***@example.com (card ****-****-****-1111)")
        );
        assert_eq!(result.findings.len(), 2);
    }
}
