//! The mTLS tests' rig: throwaway CAs made with rcgen, a rustls server on 127.0.0.1:0 that
//! requires client certificates, the actions that bind a `client_certificate` credential, an
//! executor over a real SQLite journal, and the forms of a private key that must never leak.
//! Shared by `http_mtls` (this binary) and `mtls_trace` (a binary of its own, with a global
//! TRACE subscriber).

#![allow(
    dead_code,
    unreachable_pub,
    reason = "each of the two test binaries uses a part of the rig"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::ActionResult;
use sallyport_core::vault::{
    Binding, ClientCertificate, CredentialKind, CredentialMeta, MemoryVault, Secret,
};
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::HttpChannel;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

pub(crate) const CREDENTIAL: &str = "mtls-api";

/// Who the upstream says the caller is.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "whoami", effect = observe, credential = "mtls-api")]
#[http(get = "/v1/whoami/{probe}", result = Whoami)]
pub(crate) struct WhoAmI {
    probe: String,
}

/// File one report; never resent after it left.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "file_report", effect = external_commitment, reconcile = "whoami",
         credential = "mtls-api")]
#[http(post = "/v1/reports/{report_id}", result = Whoami)]
pub(crate) struct FileReport {
    report_id: String,
}

/// Who the upstream says the caller is, with a second client certificate.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "whoami_b", effect = observe, credential = "mtls-api-b")]
#[http(get = "/v1/whoami/{probe}", result = Whoami)]
pub(crate) struct WhoAmIB {
    probe: String,
}

/// The same upstream, without any credential.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "anonymous_report", effect = external_commitment, reconcile = "whoami")]
#[http(post = "/v1/reports/{report_id}", result = Whoami)]
pub(crate) struct AnonymousReport {
    report_id: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
pub(crate) struct Whoami {
    pub(crate) client: String,
    pub(crate) echo: String,
}

/// A CA made for one test: its certificate (DER) and an issuer for leaf certificates.
pub(crate) struct TestCa {
    pub(crate) der: Vec<u8>,
    pub(crate) issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    pub(crate) fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        Self {
            der: cert.der().to_vec(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf certificate for `names` signed by this CA: (chain PEM, leaf DER, key PEM).
    pub(crate) fn leaf(&self, names: &[&str], common_name: &str) -> (String, Vec<u8>, String) {
        let mut params =
            CertificateParams::new(names.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        (cert.pem(), cert.der().to_vec(), key.serialize_pem())
    }
}

/// A TLS server that requires a client certificate of `client_ca`, counts TCP connections,
/// completed handshakes and HTTP requests, records the client certificate it saw, and
/// answers `200 {"client": <certificate count>, "echo": <what the test set>}`.
pub(crate) struct MtlsUpstream {
    pub(crate) port: u16,
    pub(crate) server_ca: Vec<u8>,
    pub(crate) connections: Arc<AtomicU64>,
    pub(crate) handshakes: Arc<AtomicU64>,
    pub(crate) requests: Arc<AtomicU64>,
    pub(crate) seen: Arc<Mutex<Vec<Vec<u8>>>>,
    pub(crate) echo: Arc<Mutex<String>>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl Drop for MtlsUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MtlsUpstream {
    pub(crate) async fn start(client_ca: &TestCa, tls12_only: bool) -> Self {
        #[allow(
            deprecated,
            reason = "ring, as sallyport-http's channel: rustls 0.23.48 names no replacement that keeps ring"
        )]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server_ca = TestCa::new("sallyport test server CA");
        let (chain, _, key) = server_ca.leaf(&["127.0.0.1", "localhost"], "127.0.0.1");
        let chain = vec![
            rustls::pki_types::CertificateDer::from(
                rustls::pki_types::pem::PemObject::from_pem_slice(chain.as_bytes())
                    .map(|c: rustls::pki_types::CertificateDer<'_>| c.to_vec())
                    .expect("server chain"),
            ),
            rustls::pki_types::CertificateDer::from(server_ca.der.clone()),
        ];
        let key: rustls::pki_types::PrivateKeyDer<'static> =
            rustls::pki_types::pem::PemObject::from_pem_slice(key.as_bytes()).expect("key");
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from(
                client_ca.der.clone(),
            ))
            .expect("client CA");
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::clone(&provider),
        )
        .build()
        .expect("client verifier");
        let versions: &[&rustls::SupportedProtocolVersion] = if tls12_only {
            &[&rustls::version::TLS12]
        } else {
            rustls::DEFAULT_VERSIONS
        };
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .expect("protocol versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .expect("server certificate");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let connections = Arc::new(AtomicU64::new(0));
        let handshakes = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let echo = Arc::new(Mutex::new(String::new()));
        let (c, h, r, s, e) = (
            Arc::clone(&connections),
            Arc::clone(&handshakes),
            Arc::clone(&requests),
            Arc::clone(&seen),
            Arc::clone(&echo),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                c.fetch_add(1, Ordering::SeqCst);
                let (acceptor, h, r, s, e) = (
                    acceptor.clone(),
                    Arc::clone(&h),
                    Arc::clone(&r),
                    Arc::clone(&s),
                    Arc::clone(&e),
                );
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    h.fetch_add(1, Ordering::SeqCst);
                    let peer: Vec<Vec<u8>> = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .map(|certs| certs.iter().map(|c| c.to_vec()).collect())
                        .unwrap_or_default();
                    let count = peer.len();
                    s.lock().expect("seen").extend(peer);
                    // Keep-alive: answer every request on this connection.
                    loop {
                        let mut head = Vec::new();
                        let mut buf = [0u8; 4096];
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                            match tls.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => head.extend_from_slice(&buf[..n]),
                            }
                        }
                        r.fetch_add(1, Ordering::SeqCst);
                        let body = json!({
                            "client": format!("{count} certificates"),
                            "echo": e.lock().expect("echo").clone(),
                        })
                        .to_string();
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if tls.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self {
            port,
            server_ca: server_ca.der,
            connections,
            handshakes,
            requests,
            seen,
            echo,
            task,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

pub(crate) struct Rig {
    pub(crate) executor: Executor,
    pub(crate) vault: Arc<MemoryVault>,
    pub(crate) channel: HttpChannel,
    pub(crate) journal: std::path::PathBuf,
    pub(crate) _dir: tempfile::TempDir,
}

pub(crate) fn rig(upstream: &MtlsUpstream) -> Rig {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let channel = HttpChannel::builder()
        .base_url(upstream.url())
        .add_root_certificate(upstream.server_ca.clone())
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .build()
        .expect("channel");
    let catalog = Catalog::builder()
        .action::<WhoAmI>()
        .action::<FileReport>()
        .action::<AnonymousReport>()
        .action::<WhoAmIB>()
        .build()
        .expect("catalog");
    let vault = Arc::new(MemoryVault::new());
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(&journal).expect("journal"))
        .vault_arc(vault.clone())
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .channel(channel.clone())
        .build()
        .expect("executor");
    Rig {
        executor,
        vault,
        channel,
        journal,
        _dir: dir,
    }
}

impl Rig {
    pub(crate) fn set_certificate(&self, upstream: &MtlsUpstream, chain: &str, key: &str) {
        self.set_named_certificate(CREDENTIAL, upstream, chain, key);
    }

    pub(crate) fn set_named_certificate(
        &self,
        name: &str,
        upstream: &MtlsUpstream,
        chain: &str,
        key: &str,
    ) {
        self.vault.set(
            CredentialMeta::new(
                name,
                CredentialKind::ClientCertificate(ClientCertificate::new(chain)),
                Binding::url(upstream.url()),
            ),
            Secret::new(key),
        );
    }

    pub(crate) async fn call(&self, action: &str, args: serde_json::Value) -> ActionResult {
        self.executor.call(action, args, &Session::new("s1")).await
    }
}

/// The forms of a PEM private key that must never leak: the PEM, its base64 body joined
/// without line breaks, and every line of that body.
pub(crate) fn key_forms(key_pem: &str) -> Vec<String> {
    let lines: Vec<&str> = key_pem
        .lines()
        .filter(|l| !l.starts_with("-----") && !l.is_empty())
        .collect();
    let mut forms = vec![key_pem.to_owned(), lines.concat()];
    forms.extend(lines.iter().map(|l| (*l).to_owned()));
    forms
}

pub(crate) fn assert_no_key(key_pem: &str, text: &str, what: &str) {
    for form in key_forms(key_pem) {
        assert!(
            !text.contains(&form),
            "the private key leaked into {what}: {text}"
        );
    }
}
