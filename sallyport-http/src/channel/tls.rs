//! TLS and the pooled reqwest clients: one verifier for the platform's roots (plus any
//! the host adds), one client per connect timeout in use.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::HttpChannel;
use crate::error::BuildError;

pub(super) fn tls_config(roots: &[Vec<u8>]) -> Result<rustls::ClientConfig, BuildError> {
    // rustls 0.23.48 deprecates `ring::default_provider` because ring has no post-quantum
    // key exchange, and names no replacement that keeps ring: its only undeprecated built-in
    // provider is aws-lc-rs, a C library this crate does not build (it would add its build
    // to every user's). The channel stays on ring, with the same
    // cipher suites and key exchange groups as before.
    #[allow(
        deprecated,
        reason = "ring has no post-quantum key exchange; see the comment above"
    )]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = if roots.is_empty() {
        rustls_platform_verifier::Verifier::new(Arc::clone(&provider)).map_err(BuildError::Tls)?
    } else {
        let extra = roots
            .iter()
            .map(|der| rustls::pki_types::CertificateDer::from(der.clone()));
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra, Arc::clone(&provider))
            .map_err(BuildError::Tls)?
    };
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(BuildError::Tls)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

impl HttpChannel {
    /// The reqwest client the channel uses for `connect_timeout`: no redirects, no proxy,
    /// no hidden retries, `TCP_NODELAY`, keep-alive pooling, HTTP/1.1, no decompression.
    /// Exposed so benchmarks can compare against the very same client settings.
    ///
    /// # Errors
    ///
    /// [`BuildError::Client`] when reqwest cannot build it.
    pub fn client(&self, connect_timeout: Duration) -> Result<reqwest::Client, BuildError> {
        let mut clients = self
            .inner
            .clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = clients.get(&connect_timeout) {
            return Ok(client.clone());
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .no_proxy()
            .tcp_nodelay(true)
            .connect_timeout(connect_timeout)
            .pool_idle_timeout(self.inner.pool_idle_timeout)
            .http1_only()
            .referer(false)
            .tls_backend_preconfigured(self.inner.tls.clone())
            .build()
            .map_err(|e| BuildError::Client(e.without_url()))?;
        clients.insert(connect_timeout, client.clone());
        Ok(client)
    }
}
