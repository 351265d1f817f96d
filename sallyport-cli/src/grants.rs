//! `sallyport vault grants …`: the OAuth grants users connected, listed (never a token) and
//! disconnected (revoked at the provider, RFC 7009, then removed).
//!
//! The grants are the vault file's own, or, with `SALLYPORT_GRANTS_POSTGRES` set to a
//! connection string, those a fleet keeps in PostgreSQL, opened with the key the vault holds
//! as credential `grants-key` (or the name in `SALLYPORT_GRANTS_KEY`); `credentials connect`
//! stores a new grant in the same place ([`with_grants_vault`]).

use std::time::{SystemTime, UNIX_EPOCH};

use sallyport_core::consent::escape;
use sallyport_core::vault::{GrantKey, GrantSummary, Vault, VaultError};
use sallyport_http::HttpChannel;
use sallyport_http::oauth::{Disconnect, DisconnectError};
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::args::GrantsCommand;
use crate::audit::runtime;
use crate::exit::{Exit, Failure, chain};
use crate::vault::{Backend, print_json};

/// The environment variable naming the PostgreSQL database whose grant store
/// (`sallyport_postgres::PgGrantStore`) `vault grants` reads instead of the vault file's own.
/// From the environment, not the command line: a connection string may carry a password.
pub(crate) const GRANTS_POSTGRES_ENV: &str = "SALLYPORT_GRANTS_POSTGRES";

/// The environment variable naming the vault credential that holds the grant store's key
/// (64 hex digits); `grants-key` when unset.
pub(crate) const GRANTS_KEY_ENV: &str = "SALLYPORT_GRANTS_KEY";

/// `vault grants …` on the grants a fleet keeps in PostgreSQL: `vault`'s credentials (and
/// the store's key, a credential of it) with the store at `url`.
/// Runs `f` on a runtime with the vault as the grant commands see it: its own grants, or,
/// when [`GRANTS_POSTGRES_ENV`] names a database, the vault file's credentials with their
/// grants in that PostgreSQL grant store (its key the vault's `grants-key`, or the name in
/// [`GRANTS_KEY_ENV`]). A keychain vault keeps no grant store's key, so it is refused there.
pub(crate) fn with_grants_vault<T>(
    backend: Backend,
    f: impl FnOnce(&tokio::runtime::Runtime, &dyn Vault) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let rt = runtime()?;
    let url = match (std::env::var(GRANTS_POSTGRES_ENV), backend) {
        (Err(_), backend) => return f(&rt, backend.vault()),
        (Ok(_), Backend::Keychain(_)) => {
            return Err(Failure::new(
                Exit::Usage,
                format!(
                    "{GRANTS_POSTGRES_ENV} is for a vault file; the keychain keeps no grant store's key"
                ),
            ));
        }
        (Ok(url), Backend::File(vault)) => (url, vault),
    };
    let (url, vault) = url;
    let key_name = std::env::var(GRANTS_KEY_ENV).unwrap_or_else(|_| "grants-key".to_owned());
    let kek = rt.block_on(sallyport_postgres::GrantKek::from_vault(&vault, &key_name))?;
    let store = rt
        .block_on(sallyport_postgres::PgGrantStore::builder(&url, kek).connect())
        .map_err(|e| {
            Failure::new(
                Exit::Failure,
                format!("cannot open the PostgreSQL grant store: {}", chain(&e)),
            )
        })?;
    let vault = vault.with_grant_store(std::sync::Arc::new(store));
    f(&rt, &vault)
}

/// `vault grants …` and `credentials list|disconnect`.
pub(crate) fn run(backend: Backend, cmd: &GrantsCommand) -> Result<(), Failure> {
    with_grants_vault(backend, |rt, vault| run_with(rt, vault, cmd))
}

fn run_with(
    rt: &tokio::runtime::Runtime,
    vault: &dyn Vault,
    cmd: &GrantsCommand,
) -> Result<(), Failure> {
    match cmd {
        GrantsCommand::List(args) => {
            let store = vault.grants().ok_or_else(no_grants)?;
            let listed = rt.block_on(store.list(args.credential.as_deref()))?;
            let now = unix_ms(SystemTime::now());
            let views: Vec<GrantView> = listed.iter().map(|g| GrantView::of(g, now)).collect();
            if args.json {
                print_json(&views)?;
            } else if views.is_empty() {
                println!("no grants");
            } else {
                println!(
                    "{:<24} {:<24} {:<18} {:<26} SCOPES",
                    "CREDENTIAL", "SUBJECT", "STATE", "EXPIRES"
                );
                for view in &views {
                    let subject = view
                        .subject
                        .as_deref()
                        .map_or_else(|| "(shared)".to_owned(), |s| escape(s).into_owned());
                    // The scopes granted as they are; the ones asked for (a grant stored
                    // without what was granted) marked as such.
                    let scopes = match (view.scopes.is_empty(), view.scopes_granted) {
                        (true, false) => "(client defaults)".to_owned(),
                        (true, true) => "(none granted)".to_owned(),
                        (false, true) => view.scopes.join(" "),
                        (false, false) => format!("{} (asked)", view.scopes.join(" ")),
                    };
                    println!(
                        "{:<24} {:<24} {:<18} {:<26} {scopes}",
                        view.credential,
                        subject,
                        view.state.as_str(),
                        view.expires_at.as_deref().unwrap_or("-"),
                    );
                }
            }
            Ok(())
        }
        GrantsCommand::Disconnect(args) => {
            vault.grants().ok_or_else(no_grants)?;
            let key = match &args.subject {
                Some(subject) => GrantKey::for_subject(args.name.as_str(), subject.as_str()),
                None => GrantKey::shared(args.name.as_str()),
            };
            let mut request = Disconnect::new(key);
            if args.force {
                request = request.force();
            }
            let channel = HttpChannel::builder().build().map_err(|e| {
                Failure::new(
                    Exit::Failure,
                    format!("cannot set up the HTTP client: {}", chain(&e)),
                )
            })?;
            let done = rt
                .block_on(channel.disconnect(vault, request))
                .map_err(|e| disconnect_failure(&e))?;
            println!("{done}");
            Ok(())
        }
    }
}

fn no_grants() -> Failure {
    Failure::new(
        Exit::Failure,
        "this vault keeps no OAuth grants (use the vault file)",
    )
}

fn disconnect_failure(e: &DisconnectError) -> Failure {
    let exit = match e {
        DisconnectError::NotRevoked { .. } => Exit::NotRevoked,
        DisconnectError::NotConnected { .. } | DisconnectError::NotOAuth { .. } => Exit::NotFound,
        DisconnectError::Vault(VaultError::Locked) => Exit::Locked,
        _ => Exit::Failure,
    };
    Failure::new(exit, chain(e))
}

/// A grant's state, from what the store tells without opening it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum GrantState {
    /// A refresh refused for good: the user must connect the account again.
    NeedsReconnecting,
    /// An access token valid now.
    Active,
    /// The access token expired; the next call refreshes it.
    Expired,
    /// Connected, no access token asked for yet.
    Connected,
    /// Neither token held.
    Empty,
}

impl GrantState {
    fn as_str(self) -> &'static str {
        match self {
            Self::NeedsReconnecting => "needs reconnecting",
            Self::Active => "active",
            Self::Expired => "expired",
            Self::Connected => "connected",
            Self::Empty => "empty",
        }
    }
}

/// What `grants list` shows of a grant: names, scopes, times and state, never a token.
#[derive(Serialize)]
struct GrantView {
    credential: String,
    subject: Option<String>,
    scopes: Vec<String>,
    /// Whether `scopes` are what the provider granted, or what the credential asks for.
    scopes_granted: bool,
    state: GrantState,
    /// RFC 3339, UTC.
    expires_at: Option<String>,
    expires_at_ms: Option<u64>,
    refresh_token: bool,
    reconnect: Option<String>,
    version: u64,
}

impl GrantView {
    fn of(summary: &GrantSummary, now_ms: u64) -> Self {
        let state = match (&summary.reconnect, summary.expires_at_ms) {
            (Some(_), _) => GrantState::NeedsReconnecting,
            (None, Some(at)) if at > now_ms => GrantState::Active,
            (None, Some(_)) => GrantState::Expired,
            (None, None) if summary.refresh_token => GrantState::Connected,
            (None, None) => GrantState::Empty,
        };
        Self {
            credential: summary.credential.clone(),
            subject: summary.subject.clone(),
            scopes: summary.scopes.clone(),
            scopes_granted: summary.scopes_granted,
            state,
            expires_at: summary.expires_at_ms.and_then(rfc3339),
            expires_at_ms: summary.expires_at_ms,
            refresh_token: summary.refresh_token,
            reconnect: summary.reconnect.clone(),
            version: summary.version,
        }
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn rfc3339(ms: u64) -> Option<String> {
    let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
    at.replace_millisecond(0).ok()?.format(&Rfc3339).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_follows_the_reconnect_mark_then_the_expiry() {
        let key = GrantKey::for_subject("github", "alice");
        let view = |expires: Option<u64>, refresh: bool, reconnect: Option<&str>| {
            GrantView::of(
                &GrantSummary::new(
                    &key,
                    vec!["api:read".into()],
                    3,
                    expires,
                    refresh,
                    reconnect.map(str::to_owned),
                ),
                1_000,
            )
            .state
        };
        assert_eq!(view(Some(2_000), true, None), GrantState::Active);
        assert_eq!(view(Some(500), true, None), GrantState::Expired);
        assert_eq!(view(None, true, None), GrantState::Connected);
        assert_eq!(view(None, false, None), GrantState::Empty);
        assert_eq!(
            view(Some(2_000), true, Some("revoked")),
            GrantState::NeedsReconnecting
        );
        assert_eq!(
            rfc3339(1_767_225_600_123).as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
    }
}
