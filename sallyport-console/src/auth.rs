//! Login tokens, console sessions and CSRF tokens.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use sallyport_core::approval::Decider;
use subtle::ConstantTimeEq;

/// The secret a person types to log in to the console. Its `Debug` output never shows it.
#[derive(Clone)]
pub struct LoginToken(String);

impl std::fmt::Debug for LoginToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoginToken([hidden])")
    }
}

/// Why a login token could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The system's random source failed.
    #[error("the system's random source failed")]
    Random,
    /// The token file could not be read.
    #[error("cannot read the token file")]
    Read(#[source] std::io::Error),
    /// The token is shorter than [`MIN_TOKEN_BYTES`] bytes (after trimming whitespace): the
    /// console refuses to start with it.
    #[error(
        "a console login token has at least {MIN_TOKEN_BYTES} bytes and this one has {0}: use a generated one (64 hex digits), e.g. `openssl rand -hex 32`"
    )]
    TooShort(usize),
}

/// The shortest login token accepted, in bytes (after trimming whitespace): 32.
pub const MIN_TOKEN_BYTES: usize = 32;

impl LoginToken {
    /// A fresh token: 32 random bytes as 64 hex digits.
    ///
    /// # Errors
    ///
    /// [`TokenError::Random`].
    pub fn generate() -> Result<Self, TokenError> {
        random_hex(32).map(Self).ok_or(TokenError::Random)
    }

    /// A token of the host's choosing, trimmed.
    ///
    /// # Errors
    ///
    /// [`TokenError::TooShort`] under [`MIN_TOKEN_BYTES`] bytes.
    pub fn new(token: &str) -> Result<Self, TokenError> {
        let token = token.trim();
        if token.len() < MIN_TOKEN_BYTES {
            return Err(TokenError::TooShort(token.len()));
        }
        Ok(Self(token.to_owned()))
    }

    /// The token in a file (its first line, trimmed).
    ///
    /// # Errors
    ///
    /// [`TokenError::Read`], [`TokenError::TooShort`].
    pub fn from_file(path: &Path) -> Result<Self, TokenError> {
        let text = std::fs::read_to_string(path).map_err(TokenError::Read)?;
        Self::new(text.lines().next().unwrap_or(""))
    }

    /// The token, to print it once to the person who will log in.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is this token (in constant time over the token's length).
    pub(crate) fn matches(&self, candidate: &str) -> bool {
        let a = self.0.as_bytes();
        let b = candidate.trim().as_bytes();
        a.len() == b.len() && bool::from(a.ct_eq(b))
    }
}

/// `n` random bytes as hex, or `None` when the random source fails.
pub(crate) fn random_hex(n: usize) -> Option<String> {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).ok()?;
    Some(hex::encode(buf))
}

/// Constant-time comparison of two short strings.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A logged-in person.
#[derive(Clone, Debug)]
pub(crate) struct SessionInfo {
    /// The console user (recorded as `decided_by`): a token's user name, or the OpenID
    /// subject.
    pub(crate) user: String,
    /// The display name (an OpenID sign-in's), if any.
    pub(crate) name: Option<String>,
    /// The groups (an OpenID sign-in's).
    pub(crate) groups: Vec<String>,
    /// The CSRF token every form of this session carries.
    pub(crate) csrf: String,
}

impl SessionInfo {
    /// The name pages show: the display name, else the user.
    pub(crate) fn shown_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.user)
    }

    /// Who decides in this session, through `channel`: the user, with the display name and
    /// groups when the sign-in gave them (a token's session gives neither).
    pub(crate) fn decider(&self, channel: &str) -> Decider {
        let mut decider = Decider::new(self.user.clone(), channel);
        if let Some(name) = &self.name {
            decider = decider.with_name(name.clone());
        }
        if !self.groups.is_empty() {
            decider = decider.with_groups(self.groups.clone());
        }
        decider
    }
}

struct Entry {
    info: SessionInfo,
    last_seen: Instant,
}

/// The console's sessions, in memory: a restart logs everyone out.
pub(crate) struct Sessions {
    ttl: Duration,
    map: Mutex<HashMap<String, Entry>>,
}

impl Sessions {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Opens a session for `user`: its cookie value, or `None` when the random source fails.
    pub(crate) fn open(&self, user: &str) -> Option<String> {
        self.open_for(user, None, Vec::new())
    }

    /// Opens a session for `user` with a display name and groups: its cookie value, or
    /// `None` when the random source fails.
    pub(crate) fn open_for(
        &self,
        user: &str,
        name: Option<String>,
        groups: Vec<String>,
    ) -> Option<String> {
        let id = random_hex(32)?;
        let csrf = random_hex(32)?;
        let mut map = self.map.lock().ok()?;
        let ttl = self.ttl;
        map.retain(|_, e| e.last_seen.elapsed() < ttl);
        map.insert(
            id.clone(),
            Entry {
                info: SessionInfo {
                    user: user.to_owned(),
                    name,
                    groups,
                    csrf,
                },
                last_seen: Instant::now(),
            },
        );
        Some(id)
    }

    /// The session a cookie value names, if it is live (its idle time is reset).
    pub(crate) fn get(&self, id: &str) -> Option<SessionInfo> {
        let mut map = self.map.lock().ok()?;
        let entry = map.get_mut(id)?;
        if entry.last_seen.elapsed() >= self.ttl {
            map.remove(id);
            return None;
        }
        entry.last_seen = Instant::now();
        Some(entry.info.clone())
    }

    /// Ends a session.
    pub(crate) fn close(&self, id: &str) {
        if let Ok(mut map) = self.map.lock() {
            map.remove(id);
        }
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly_and_never_print() {
        let token = LoginToken::new("  0123456789abcdef0123456789abcdef0123  ").expect("token");
        assert!(token.matches("0123456789abcdef0123456789abcdef0123"));
        assert!(!token.matches("0123456789abcdef0123456789abcdef012"));
        assert!(!token.matches("0123456789abcdef0123456789abcdef0124"));
        assert!(!format!("{token:?}").contains("0123"));
        assert!(matches!(
            LoginToken::new("short"),
            Err(TokenError::TooShort(5))
        ));
        let generated = LoginToken::generate().expect("random");
        assert_eq!(generated.expose().len(), 64);
        assert_ne!(
            generated.expose(),
            LoginToken::generate().expect("random").expose()
        );
    }

    #[test]
    fn a_token_under_32_bytes_is_refused_with_a_clear_error() {
        // 31 bytes: refused; 32: accepted. Whitespace around it does not count.
        let short = "x".repeat(31);
        let err = LoginToken::new(&format!("  {short}\n")).expect_err("too short");
        assert!(matches!(err, TokenError::TooShort(31)));
        assert_eq!(
            err.to_string(),
            "a console login token has at least 32 bytes and this one has 31: use a generated one (64 hex digits), e.g. `openssl rand -hex 32`"
        );
        assert!(LoginToken::new(&"x".repeat(32)).is_ok());
        // Counted in bytes, not characters: 16 two-byte characters are 32 bytes.
        assert!(LoginToken::new(&"é".repeat(16)).is_ok());
        assert!(matches!(
            LoginToken::new(&"é".repeat(15)),
            Err(TokenError::TooShort(30))
        ));
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("token");
        std::fs::write(&file, "only-sixteen-ch!\n").expect("write");
        assert!(matches!(
            LoginToken::from_file(&file),
            Err(TokenError::TooShort(16))
        ));
    }

    #[test]
    fn sessions_expire_when_idle_and_close() {
        let sessions = Sessions::new(Duration::from_millis(50));
        let id = sessions.open("alice").expect("open");
        let info = sessions.get(&id).expect("live");
        assert_eq!(info.user, "alice");
        assert_eq!(info.csrf.len(), 64);
        std::thread::sleep(Duration::from_millis(80));
        assert!(sessions.get(&id).is_none());
        let id = sessions.open("bob").expect("open");
        sessions.close(&id);
        assert!(sessions.get(&id).is_none());
    }

    #[test]
    fn a_token_session_decides_as_before_and_a_signed_in_one_with_name_and_groups() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let token = sessions
            .get(&sessions.open("alice").expect("open"))
            .expect("live");
        assert_eq!(token.decider("console"), Decider::new("alice", "console"));
        assert_eq!(token.shown_name(), "alice");
        let id = sessions
            .open_for(
                "sub-123",
                Some("Alice Approver".into()),
                vec!["approvers".into()],
            )
            .expect("open");
        let oidc = sessions.get(&id).expect("live");
        assert_eq!(oidc.shown_name(), "Alice Approver");
        assert_eq!(
            oidc.decider("console"),
            Decider::new("sub-123", "console")
                .with_name("Alice Approver")
                .with_groups(["approvers"])
        );
    }

    #[test]
    fn cookies_are_found_by_exact_name() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::COOKIE,
            "a=1; sallyport_console_x=2".parse().expect("hv"),
        );
        headers.append(header::COOKIE, "sallyport_console=abc".parse().expect("hv"));
        assert_eq!(cookie(&headers, "sallyport_console"), Some("abc"));
        assert_eq!(cookie(&headers, "a"), Some("1"));
        assert_eq!(cookie(&headers, "b"), None);
    }
}
