//! Streamable HTTP on loopback (feature `http`).

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::server::{McpServer, ServeError};

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

impl McpServer {
    /// Serves Streamable HTTP at `http://{addr}/mcp` until the process ends. Each MCP
    /// session is one sallyport session. Only loopback addresses are accepted: put a real
    /// authenticating proxy in front for anything else.
    ///
    /// # Errors
    ///
    /// [`ServeError::NotLoopback`] for any other address, [`ServeError::Io`] when the
    /// listener cannot be bound or fails.
    pub async fn serve_http(&self, addr: SocketAddr) -> Result<(), ServeError> {
        self.serve_http_on(bind_http(addr).await?).await
    }

    /// Serves Streamable HTTP at `/mcp` on a listener already bound to a loopback address.
    ///
    /// # Errors
    ///
    /// As [`McpServer::serve_http`].
    pub async fn serve_http_on(&self, listener: tokio::net::TcpListener) -> Result<(), ServeError> {
        let addr = listener.local_addr().map_err(ServeError::Io)?;
        if !addr.ip().is_loopback() {
            return Err(ServeError::NotLoopback(addr));
        }
        let server = self.clone();
        let service = StreamableHttpService::new(
            move || Ok(server.connection()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        axum::serve(listener, router).await.map_err(ServeError::Io)
    }
}
