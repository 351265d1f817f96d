//! Streamable HTTP on loopback (feature `http`), behind a bearer token.
//!
//! Loopback is not a boundary: every local process (and every user on a shared machine) can
//! connect to a loopback port. So every request to `/mcp` must carry
//! `Authorization: Bearer <token>`; anything else is answered `401` before the MCP service
//! sees it, so no tool runs and no session is made.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use subtle::ConstantTimeEq as _;
use zeroize::Zeroizing;

use crate::server::{McpServer, ServeError, Stateless};

/// Shortest token [`BearerToken::new`] accepts.
pub const MIN_TOKEN_LEN: usize = 32;

/// The bearer token a Streamable HTTP client must send as `Authorization: Bearer <token>`.
///
/// Generated ([`BearerToken::generate`], 256 random bits as hex) or given by the host
/// ([`BearerToken::new`]). Zeroized on drop; `Debug` prints no part of it.
#[derive(Clone)]
pub struct BearerToken(Zeroizing<String>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerToken").finish_non_exhaustive()
    }
}

impl BearerToken {
    /// A fresh token from the operating system's random source.
    ///
    /// # Errors
    ///
    /// [`ServeError::Random`] when the random source fails.
    pub fn generate() -> Result<Self, ServeError> {
        let mut bytes = Zeroizing::new([0u8; 32]);
        getrandom::fill(bytes.as_mut_slice()).map_err(ServeError::Random)?;
        let mut text = Zeroizing::new(String::with_capacity(64));
        for b in bytes.iter() {
            text.push(char::from(HEX[usize::from(b >> 4)]));
            text.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        Ok(Self(text))
    }

    /// A token the host chose (read from its own configuration).
    ///
    /// # Errors
    ///
    /// [`ServeError::InvalidToken`] when it is shorter than [`MIN_TOKEN_LEN`] or holds anything
    /// but the characters of an RFC 6750 `b64token` (`A-Z a-z 0-9 - . _ ~ + /`, trailing `=`).
    pub fn new(token: impl Into<String>) -> Result<Self, ServeError> {
        let token = Zeroizing::new(token.into());
        if token.len() < MIN_TOKEN_LEN {
            return Err(ServeError::InvalidToken("it is shorter than 32 characters"));
        }
        let body = token.trim_end_matches('=');
        if body.is_empty()
            || !body
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
        {
            return Err(ServeError::InvalidToken(
                "it may hold only A-Z a-z 0-9 - . _ ~ + / and trailing =",
            ));
        }
        Ok(Self(token))
    }

    /// The token, to hand to the client that may connect.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }

    /// Whether an `Authorization` header value carries this token (constant time in the
    /// token's bytes).
    fn accepts(&self, authorization: &[u8]) -> bool {
        let Some(scheme) = authorization.get(..7) else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case(b"bearer ") {
            return false;
        }
        let given = authorization[7..].trim_ascii();
        bool::from(given.ct_eq(self.0.as_bytes()))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Binds a listener for [`McpServer::serve_http_on`], refusing any address that is not
/// loopback before binding. Use it to learn the port when `addr` asks for port 0.
///
/// # Errors
///
/// [`ServeError::NotLoopback`] for any other address, [`ServeError::Io`] when binding fails.
pub async fn bind_http(addr: SocketAddr) -> Result<tokio::net::TcpListener, ServeError> {
    if !addr.ip().is_loopback() {
        return Err(ServeError::NotLoopback(addr));
    }
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(ServeError::Io)
}

async fn require_token(token: Arc<BearerToken>, request: Request, next: Next) -> Response {
    let authorized = request
        .headers()
        .get(header::AUTHORIZATION)
        .is_some_and(|value| token.accepts(value.as_bytes()));
    if authorized {
        return next.run(request).await;
    }
    let mut response = (
        StatusCode::UNAUTHORIZED,
        "this MCP server needs `Authorization: Bearer <token>`; the token was printed to the server's stderr at start or given by its host\n",
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
impl McpServer {
    /// Serves Streamable HTTP at `http://{addr}/mcp` until the process ends. Each MCP
    /// session (revisions up to 2025-11-25) is one sallyport session; the stateless requests
    /// of 2026-07-28 share one session and one task list (see the crate's guide). Only
    /// loopback addresses are accepted: put a real authenticating proxy in front for
    /// anything else. Every request must carry the bearer token (see
    /// [`McpServer::serve_http_on`]).
    ///
    /// # Errors
    ///
    /// [`ServeError::NotLoopback`] for any other address, [`ServeError::Io`] when the
    /// listener cannot be bound or fails, [`ServeError::Random`] when no token can be made.
    pub async fn serve_http(&self, addr: SocketAddr) -> Result<(), ServeError> {
        self.serve_http_on(bind_http(addr).await?).await
    }

    /// Serves Streamable HTTP at `/mcp` on a listener already bound to a loopback address.
    ///
    /// Every request must carry `Authorization: Bearer <token>`; without it the answer is
    /// `401` and nothing runs. The token is the one given with [`McpServer::http_token`];
    /// without one, a fresh token is generated and printed once to stderr, as
    /// `sallyport-mcp: bearer token for http://ADDR/mcp: TOKEN`, for the user to hand to
    /// their client. Nothing else logs it.
    ///
    /// # Errors
    ///
    /// As [`McpServer::serve_http`].
    pub async fn serve_http_on(&self, listener: tokio::net::TcpListener) -> Result<(), ServeError> {
        let addr = listener.local_addr().map_err(ServeError::Io)?;
        if !addr.ip().is_loopback() {
            return Err(ServeError::NotLoopback(addr));
        }
        let token = match self.configured_http_token() {
            Some(token) => Arc::clone(token),
            None => {
                let token = BearerToken::generate()?;
                eprintln!(
                    "sallyport-mcp: bearer token for http://{addr}/mcp: {}",
                    token.expose_secret()
                );
                Arc::new(token)
            }
        };
        let server = self.clone();
        let stateless = Stateless::new(self);
        let shared = stateless.clone();
        let service = StreamableHttpService::new(
            move || Ok(server.http_connection(&shared)),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let router =
            axum::Router::new()
                .nest_service("/mcp", service)
                .layer(axum::middleware::from_fn(move |request, next| {
                    require_token(Arc::clone(&token), request, next)
                }));
        let served = axum::serve(listener, router).await.map_err(ServeError::Io);
        stateless.shutdown(self);
        served
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_accepted_only_with_the_bearer_scheme_and_the_exact_value() {
        let token = BearerToken::generate().expect("random");
        let value = token.expose_secret().to_owned();
        assert_eq!(value.len(), 64);
        assert!(token.accepts(format!("Bearer {value}").as_bytes()));
        assert!(token.accepts(format!("bearer {value}").as_bytes()));
        assert!(!token.accepts(value.as_bytes()));
        assert!(!token.accepts(format!("Basic {value}").as_bytes()));
        assert!(!token.accepts(format!("Bearer {}", &value[..63]).as_bytes()));
        assert!(!token.accepts(format!("Bearer {value}0").as_bytes()));
        assert!(!token.accepts(b"Bearer "));
        assert!(!token.accepts(b""));
        assert_ne!(
            BearerToken::generate().expect("random").expose_secret(),
            value
        );
        assert_eq!(format!("{token:?}"), "BearerToken { .. }");
    }

    #[test]
    fn a_host_token_must_be_long_and_plain() {
        assert!(BearerToken::new("short").is_err());
        assert!(BearerToken::new(format!("{}\r\nX: y", "a".repeat(40))).is_err());
        assert!(BearerToken::new("=".repeat(40)).is_err());
        assert!(BearerToken::new(format!("{}==", "A1-._~+/".repeat(5))).is_ok());
    }
}
