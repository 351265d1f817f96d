//! [`WebhookReceiver`] and its builder.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use axum::routing::post;
use sallyport_core::Executor;
use sallyport_core::vault::{Vault, VaultError};

use crate::replay::ReplayGuard;

/// The path the receiver answers on unless told otherwise.
pub const DEFAULT_PATH: &str = "/approvals/decision";

/// How far a signed timestamp may be from the receiver's clock, either way, unless told
/// otherwise: 300 seconds.
pub const DEFAULT_REPLAY_WINDOW: Duration = Duration::from_secs(300);

/// The longest body accepted unless told otherwise: 16 KiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024;

/// How many accepted deliveries the replay guard remembers within one window unless told
/// otherwise; beyond that new deliveries are refused (`too_many_deliveries`) until older
/// ones leave the window.
pub const DEFAULT_REPLAY_CAPACITY: usize = 10_000;

/// The shortest shared secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// Why a receiver could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// [`WebhookReceiverBuilder::secret_credential`] was not called.
    #[error("no secret credential: name the vault credential that holds the shared secret")]
    MissingSecretCredential,
    /// The credential name is not a valid vault name.
    #[error("the secret credential's name is not a vault credential name")]
    InvalidSecretCredential(#[source] VaultError),
    /// The executor was built without a vault, so there is nowhere to keep the secret.
    #[error("the executor has no vault to hold the webhook's shared secret")]
    MissingVault,
    /// The path does not start with `/`, or has characters other than
    /// `A-Z a-z 0-9 - . _ ~ /`, or an empty segment.
    #[error("the receiver's path is `/` followed by segments of A-Z a-z 0-9 - . _ ~")]
    InvalidPath,
    /// The replay window is shorter than one second.
    #[error("the replay window is at least one second")]
    InvalidReplayWindow,
    /// The body limit is zero.
    #[error("the body limit is at least one byte")]
    InvalidMaxBodyBytes,
    /// The replay capacity is zero.
    #[error("the replay guard remembers at least one delivery")]
    InvalidReplayCapacity,
}

/// Builds a [`WebhookReceiver`]. Setters never fail; [`WebhookReceiverBuilder::build`]
/// reports what is wrong.
#[must_use]
#[derive(Debug)]
pub struct WebhookReceiverBuilder {
    executor: Executor,
    secret_credential: Option<String>,
    replay_window: Duration,
    path: String,
    max_body_bytes: usize,
    replay_capacity: usize,
}

impl WebhookReceiverBuilder {
    /// The vault credential holding the shared secret (its value, as
    /// [`Secret::expose`](sallyport_core::vault::Secret::expose) gives it, is the HMAC key).
    /// Required. It is resolved for every delivery, so a rotation applies to the next one.
    pub fn secret_credential(mut self, name: impl Into<String>) -> Self {
        self.secret_credential = Some(name.into());
        self
    }

    /// How far a signed timestamp may be from this server's clock, either way (whole
    /// seconds; default [`DEFAULT_REPLAY_WINDOW`]). Accepted deliveries are remembered this
    /// long to refuse replays.
    pub fn replay_window(mut self, window: Duration) -> Self {
        self.replay_window = window;
        self
    }

    /// The path the router answers `POST` on (default [`DEFAULT_PATH`]).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// The longest body accepted (default [`DEFAULT_MAX_BODY_BYTES`]); longer ones are
    /// refused `413 body_too_large` unread.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// How many accepted deliveries are remembered within one window (default
    /// [`DEFAULT_REPLAY_CAPACITY`]).
    pub fn replay_capacity(mut self, deliveries: usize) -> Self {
        self.replay_capacity = deliveries;
        self
    }

    /// Builds the receiver.
    ///
    /// # Errors
    ///
    /// [`BuildError::MissingSecretCredential`], [`BuildError::InvalidSecretCredential`],
    /// [`BuildError::MissingVault`] when the executor has no vault,
    /// [`BuildError::InvalidPath`], [`BuildError::InvalidReplayWindow`],
    /// [`BuildError::InvalidMaxBodyBytes`], [`BuildError::InvalidReplayCapacity`].
    pub fn build(self) -> Result<WebhookReceiver, BuildError> {
        let credential = self
            .secret_credential
            .ok_or(BuildError::MissingSecretCredential)?;
        sallyport_core::vault::check_name(&credential)
            .map_err(BuildError::InvalidSecretCredential)?;
        let vault = Arc::clone(self.executor.vault().ok_or(BuildError::MissingVault)?);
        if !valid_path(&self.path) {
            return Err(BuildError::InvalidPath);
        }
        let window_secs = self.replay_window.as_secs();
        if window_secs == 0 {
            return Err(BuildError::InvalidReplayWindow);
        }
        if self.max_body_bytes == 0 {
            return Err(BuildError::InvalidMaxBodyBytes);
        }
        if self.replay_capacity == 0 {
            return Err(BuildError::InvalidReplayCapacity);
        }
        Ok(WebhookReceiver {
            shared: Arc::new(Shared {
                executor: self.executor,
                vault,
                credential,
                window_secs,
                path: self.path,
                max_body_bytes: self.max_body_bytes,
                replay: ReplayGuard::new(window_secs, self.replay_capacity),
            }),
        })
    }
}

/// `/` followed by non-empty segments of unreserved characters (so axum's route syntax —
/// `{param}`, `*` — cannot sneak in).
fn valid_path(path: &str) -> bool {
    path.strip_prefix('/').is_some_and(|rest| {
        rest.split('/').all(|segment| {
            !segment.is_empty()
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
        })
    })
}

/// What the handler shares across deliveries.
pub(crate) struct Shared {
    pub(crate) executor: Executor,
    pub(crate) vault: Arc<dyn Vault>,
    pub(crate) credential: String,
    pub(crate) window_secs: u64,
    pub(crate) path: String,
    pub(crate) max_body_bytes: usize,
    pub(crate) replay: ReplayGuard,
}

/// Receives signed decisions on approvals and records them through
/// [`Executor::decide`]'s path (see the [crate docs](crate) for the wire format).
///
/// Cheap to clone; every clone shares one replay guard, so mount one receiver's router
/// (or clones of it) per process.
#[derive(Clone)]
pub struct WebhookReceiver {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for WebhookReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookReceiver")
            .field("path", &self.shared.path)
            .field("secret_credential", &self.shared.credential)
            .field("replay_window_secs", &self.shared.window_secs)
            .field("max_body_bytes", &self.shared.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl WebhookReceiver {
    /// A builder for a receiver deciding approvals in `executor`'s journal, with the shared
    /// secret in `executor`'s vault.
    pub fn builder(executor: Executor) -> WebhookReceiverBuilder {
        WebhookReceiverBuilder {
            executor,
            secret_credential: None,
            replay_window: DEFAULT_REPLAY_WINDOW,
            path: DEFAULT_PATH.to_owned(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            replay_capacity: DEFAULT_REPLAY_CAPACITY,
        }
    }

    /// The path the router answers on.
    pub fn path(&self) -> &str {
        &self.shared.path
    }

    /// An axum router answering `POST` on the receiver's path; merge or nest it into the
    /// host's own. Every response it gives carries `Cache-Control: no-store`.
    pub fn router(&self) -> Router {
        Router::new()
            .route(&self.shared.path, post(crate::handler::handle))
            .with_state(Arc::clone(&self.shared))
            .layer(DefaultBodyLimit::max(self.shared.max_body_bytes))
            .layer(axum::middleware::map_response(no_store))
    }
}

async fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::valid_path;

    #[test]
    fn paths_are_plain_segments_only() {
        for good in [
            "/approvals/decision",
            "/a",
            "/hooks/v1/sallyport.decide",
            "/a~b_c-d",
        ] {
            assert!(valid_path(good), "{good}");
        }
        for bad in [
            "",
            "/",
            "approvals",
            "/approvals/",
            "//a",
            "/a//b",
            "/{id}",
            "/*rest",
            "/a b",
            "/a?b",
            "/é",
        ] {
            assert!(!valid_path(bad), "{bad}");
        }
    }
}
