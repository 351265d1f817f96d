//! The error PostgreSQL failures become: a message with every password taken out, and the
//! SQLSTATE code when the server sent one. No `tokio_postgres` or `deadpool` type is kept,
//! so nothing a driver might print (a connection string, a `Config`) can reach a log.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// A PostgreSQL failure beneath a [`sallyport_core::journal::JournalError`] (its boxed
/// source). Carries no password: the connection string's password, and anything shaped like
/// one (`password=…`, `user:…@` in a URL), is replaced by `***` before the message is kept.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresError {
    message: String,
    code: Option<String>,
}

impl PostgresError {
    /// The server's SQLSTATE code (`23505` for a unique violation), when it sent one.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The message, passwords removed.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// A failure of this crate's own making (no driver error behind it).
    pub(crate) fn own(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: None,
        }
    }
}

impl fmt::Debug for PostgresError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresError")
            .field("message", &self.message)
            .field("code", &self.code)
            .finish()
    }
}

impl fmt::Display for PostgresError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PostgresError {}

/// SQLSTATE `25006` (`read_only_sql_transaction`): the server refused a write because it
/// takes none (a standby, or a primary set read-only to fence it during a failover).
pub(crate) const READ_ONLY_SQL_TRANSACTION: &str = "25006";

/// When a server last refused one of the journal's writes as read-only.
///
/// The connections made before then are to a server that takes no writes, and would refuse
/// every write again had the pool kept them: the pool's recycle check
/// ([`ReadOnlySeen::predates`]) closes them instead, so the next write connects anew and,
/// with `target_session_attrs=read-write` in a multi-host connection string, reaches the
/// server that takes writes now. The write that met the refusal fails like any other
/// while the journal is unavailable (nothing sent; a record kept and written again).
#[derive(Debug, Default)]
pub(crate) struct ReadOnlySeen(Mutex<Option<Instant>>);

impl ReadOnlySeen {
    /// A server refused a write as read-only just now.
    fn mark(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// Whether a connection made at `created` was made before a server last refused a
    /// write as read-only (it may be to that server: it is not used again).
    pub(crate) fn predates(&self, created: Instant) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|seen| created <= seen)
    }
}

/// Takes passwords out of text: the connection's own password wherever it appears, and
/// anything that looks like a password in a connection string. Every PostgreSQL failure
/// passes through it, so it also notes when a server refused a write as read-only
/// ([`ReadOnlySeen`], shared with the pool).
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    password: Option<String>,
    read_only: Arc<ReadOnlySeen>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor").finish_non_exhaustive()
    }
}

impl Redactor {
    /// Redacts `password` (and password-shaped text) from every message.
    pub(crate) fn new(password: Option<&[u8]>) -> Self {
        Self {
            password: password
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .filter(|p| !p.is_empty()),
            read_only: Arc::default(),
        }
    }

    /// When a server last refused a write as read-only, as the errors this redactor made
    /// tell it.
    pub(crate) fn read_only_seen(&self) -> Arc<ReadOnlySeen> {
        Arc::clone(&self.read_only)
    }

    /// `code`, noting a read-only refusal.
    fn noted(&self, code: Option<String>) -> Option<String> {
        if code.as_deref() == Some(READ_ONLY_SQL_TRANSACTION) {
            self.read_only.mark();
        }
        code
    }

    /// `text` with passwords replaced by `***`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut out = redact_connection_string(text);
        if let Some(password) = &self.password {
            out = out.replace(password.as_str(), "***");
        }
        out
    }

    /// A driver error as a [`PostgresError`]: its whole source chain, redacted.
    pub(crate) fn postgres(&self, e: &tokio_postgres::Error) -> PostgresError {
        PostgresError {
            message: self.redact(&chain_text(e)),
            code: self.noted(e.code().map(|c| c.code().to_owned())),
        }
    }

    /// Any other error (the pool's) as a [`PostgresError`].
    pub(crate) fn other(&self, e: &(dyn std::error::Error + 'static)) -> PostgresError {
        let code = std::iter::successors(Some(e), |e| e.source())
            .find_map(|e| e.downcast_ref::<tokio_postgres::Error>())
            .and_then(|e| e.code().map(|c| c.code().to_owned()));
        PostgresError {
            message: self.redact(&chain_text(e)),
            code: self.noted(code),
        }
    }
}

/// An error and its sources, `: `-joined (a repeated message is written once).
fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    for e in std::iter::successors(Some(e), |e| e.source()) {
        let text = e.to_string();
        if parts.last().is_none_or(|last| !last.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

/// Replaces the value of every `password=` key (libpq key-value form or URL query) and the
/// password of every `scheme://user:password@` authority with `***`.
pub(crate) fn redact_connection_string(text: &str) -> String {
    let mut out = redact_urls(text);
    let mut from = 0;
    while let Some(found) = out[from..].to_ascii_lowercase().find("password=") {
        let start = from + found + "password=".len();
        let rest = &out[start..];
        let end = if let Some(quoted) = rest.strip_prefix('\'') {
            // A quoted libpq value: up to the closing quote not escaped by a backslash.
            let mut escaped = false;
            let close = quoted
                .char_indices()
                .find(|&(_, c)| {
                    let closes = c == '\'' && !escaped;
                    escaped = c == '\\' && !escaped;
                    closes
                })
                .map_or(quoted.len(), |(i, _)| i + 1);
            start + 1 + close
        } else {
            start
                + rest
                    .find(|c: char| c.is_whitespace() || c == '&' || c == '\'' || c == '"')
                    .unwrap_or(rest.len())
        };
        out.replace_range(start..end, "***");
        from = start + 3;
    }
    out
}

/// `scheme://user:password@host` becomes `scheme://user:***@host`.
fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let authority_end = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..authority_end];
        match authority.rfind('@') {
            Some(at_sign) => {
                let userinfo = &authority[..at_sign];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..colon]);
                        out.push_str(":***");
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[at_sign..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[authority_end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_passwords_are_replaced_and_the_rest_kept() {
        assert_eq!(
            redact_connection_string(
                "postgres://app:s3cr%40t@db.example:5432/journal?sslmode=require"
            ),
            "postgres://app:***@db.example:5432/journal?sslmode=require"
        );
        assert_eq!(
            redact_connection_string("see postgresql://u:p@h/d and postgres://h2/d"),
            "see postgresql://u:***@h/d and postgres://h2/d"
        );
        assert_eq!(
            redact_connection_string("postgres://only-user@h/d"),
            "postgres://only-user@h/d"
        );
    }

    #[test]
    fn key_value_passwords_are_replaced_quoted_or_not() {
        assert_eq!(
            redact_connection_string("host=h user=u password=hunter2 dbname=d"),
            "host=h user=u password=*** dbname=d"
        );
        assert_eq!(
            redact_connection_string(r"host=h password='a b\' c' dbname=d"),
            "host=h password=*** dbname=d"
        );
        assert_eq!(
            redact_connection_string("postgres://h/d?user=u&password=pw&x=1"),
            "postgres://h/d?user=u&password=***&x=1"
        );
        assert_eq!(redact_connection_string("PASSWORD=Upper"), "PASSWORD=***");
    }

    #[test]
    fn a_read_only_refusal_marks_the_connections_made_before_it() {
        let redactor = Redactor::new(None);
        let seen = redactor.read_only_seen();
        let before = Instant::now();
        assert!(!seen.predates(before), "nothing refused yet");
        assert_eq!(
            redactor.noted(Some("57P01".into())).as_deref(),
            Some("57P01")
        );
        assert!(!seen.predates(before), "another failure marks nothing");
        let code = redactor.noted(Some(READ_ONLY_SQL_TRANSACTION.into()));
        assert_eq!(code.as_deref(), Some(READ_ONLY_SQL_TRANSACTION));
        assert!(seen.predates(before), "made before the refusal");
        let after = Instant::now() + std::time::Duration::from_millis(1);
        assert!(!seen.predates(after), "made after it");
    }

    #[test]
    fn the_connections_own_password_is_removed_anywhere() {
        let redactor = Redactor::new(Some(b"correct-horse"));
        assert_eq!(
            redactor.redact("auth failed for correct-horse at correct-horse"),
            "auth failed for *** at ***"
        );
        assert_eq!(Redactor::new(Some(b"")).redact("a b"), "a b");
    }
}
