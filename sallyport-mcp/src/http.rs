//! Streamable HTTP on loopback (feature `http`).

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::server::{McpServer, ServeError};

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
        if !addr.ip().is_loopback() {
            return Err(ServeError::NotLoopback(addr));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(ServeError::Io)?;
        self.serve_http_on(listener).await
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
