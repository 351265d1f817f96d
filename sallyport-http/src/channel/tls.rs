//! TLS and the pooled reqwest clients: one verifier for the platform's roots (plus any
//! the host adds), one client per connect timeout in use, and for each client certificate
//! credential clients of its own.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use sallyport_core::code::RefusalCode;
use sallyport_core::outcome::Refusal;
use sallyport_core::vault::{ClientCertificate, Credential, CredentialKind};
use zeroize::{Zeroize as _, Zeroizing};

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
        let client = self
            .client_builder(connect_timeout, self.inner.tls.clone())
            .build()
            .map_err(|e| BuildError::Client(e.without_url()))?;
        clients.insert(connect_timeout, client.clone());
        Ok(client)
    }

    /// The settings every client of the channel shares, with `tls`.
    fn client_builder(
        &self,
        connect_timeout: Duration,
        tls: rustls::ClientConfig,
    ) -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .no_proxy()
            .tcp_nodelay(true)
            .connect_timeout(connect_timeout)
            .pool_idle_timeout(self.inner.pool_idle_timeout)
            .http1_only()
            .referer(false)
            .tls_backend_preconfigured(tls)
    }
}

/// A client certificate credential's own clients: one per connect timeout in use, built
/// with a TLS configuration that presents the credential's chain and key and keeps its own
/// session cache, so no connection or resumed TLS session is shared with another credential
/// or with calls without one.
pub(super) struct CertClients {
    /// The chain and key the clients were built from, to notice any change of either (a
    /// rotation, or another vault's credential of the same name); the key is zeroized when
    /// the entry is replaced.
    chain: String,
    key: Zeroizing<String>,
    /// The TLS configuration with the certificate.
    tls: rustls::ClientConfig,
    clients: HashMap<Duration, reqwest::Client>,
}

/// Where the credentials' clients are kept: by credential name, one entry per credential
/// (a new version replaces the old entry, and its clients with their pooled connections).
pub(super) type CertClientMap = HashMap<String, CertClients>;

/// A refusal for a client certificate that cannot be used. The parser's own error is not
/// passed on: its text could quote the key material.
fn unusable(name: &str, what: &str) -> Refusal {
    Refusal::new(
        RefusalCode::CredentialUnavailable,
        format!("credential `{name}` {what}; nothing was sent"),
    )
}

/// The TLS configuration of `base` with the client certificate of `credential`.
fn client_auth_config(
    base: &rustls::ClientConfig,
    credential: &Credential,
    cert: &ClientCertificate,
) -> Result<rustls::ClientConfig, Refusal> {
    let name = credential.meta().name.as_str();
    let chain = CertificateDer::pem_slice_iter(cert.certificate_chain.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| unusable(name, "holds a certificate chain that is not PEM"))?;
    if chain.is_empty() {
        return Err(unusable(name, "holds no certificate in its chain"));
    }
    let mut key =
        PrivateKeyDer::from_pem_slice(credential.secret().expose().as_bytes()).map_err(|_| {
            unusable(
                name,
                "does not hold a PEM private key (PKCS#8, PKCS#1 or SEC1)",
            )
        })?;
    let signing_key = rustls::crypto::ring::sign::any_supported_type(&key);
    key.zeroize();
    let signing_key = signing_key.map_err(|_| {
        unusable(
            name,
            "holds a private key of a type TLS cannot sign with (RSA, ECDSA P-256/P-384 or Ed25519)",
        )
    })?;
    let certified = CertifiedKey::new(chain, signing_key);
    certified.keys_match().map_err(|_| {
        unusable(
            name,
            "holds a private key that does not match the first certificate of its chain",
        )
    })?;
    let mut config = base.clone();
    config.client_auth_cert_resolver = Arc::new(SingleCertAndKey::from(certified));
    // A cache of its own: a TLS session resumed from another configuration's ticket would
    // carry that handshake's client identity (or none).
    config.resumption = rustls::client::Resumption::default();
    Ok(config)
}

impl HttpChannel {
    /// The client for a call: the credential's own when it is a client certificate, the
    /// shared one for `connect_timeout` otherwise.
    pub(crate) fn client_for(
        &self,
        credential: Option<&Credential>,
        connect_timeout: Duration,
    ) -> Result<reqwest::Client, Refusal> {
        let cert = credential.and_then(|c| match &c.meta().kind {
            CredentialKind::ClientCertificate(cert) => Some((c, cert)),
            _ => None,
        });
        let Some((credential, cert)) = cert else {
            return self
                .client(connect_timeout)
                .map_err(|_| client_unavailable());
        };
        let name = credential.meta().name.as_str();
        let key = credential.secret().expose();
        let mut all = self
            .inner
            .cert_clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let current = all
            .get(name)
            .is_some_and(|e| e.chain == cert.certificate_chain && e.key.as_str() == key);
        if !current {
            let tls = client_auth_config(&self.inner.tls, credential, cert)?;
            all.insert(
                name.to_owned(),
                CertClients {
                    chain: cert.certificate_chain.clone(),
                    key: Zeroizing::new(key.to_owned()),
                    tls,
                    clients: HashMap::new(),
                },
            );
        }
        let entry = all.get_mut(name).ok_or_else(client_unavailable)?;
        if let Some(client) = entry.clients.get(&connect_timeout) {
            return Ok(client.clone());
        }
        let client = self
            .client_builder(connect_timeout, entry.tls.clone())
            .build()
            .map_err(|_| client_unavailable())?;
        entry.clients.insert(connect_timeout, client.clone());
        Ok(client)
    }
}

fn client_unavailable() -> Refusal {
    Refusal::new(
        RefusalCode::ChannelUnavailable,
        "the HTTP client could not be set up",
    )
}
