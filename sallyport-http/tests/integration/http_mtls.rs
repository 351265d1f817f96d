//! mTLS: a `client_certificate` credential against a real TLS server on 127.0.0.1:0 that
//! requires client certificates (rustls' `WebPkiClientVerifier`), with throwaway CAs made in
//! each test (rcgen).
//!
//! With the certificate of the CA the server trusts, calls complete on one cached client; a
//! call presenting no certificate, or one of another CA, is `rejected`/`auth_failed` (the
//! server read no request, so never `unknown`, even for a commitment whose request TLS 1.3
//! had already written); a key that is not PEM or does not match its certificate is
//! `credential_unavailable` with nothing sent; two credentials, and calls without one, never
//! share a connection; and the private key, in PEM or as its base64 body, appears in no
//! result, journal row, audit record, `Debug` output or TRACE log line.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use sallyport_core::code::{RefusalCode, UpstreamCode};
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::ActionResult;
use sallyport_core::vault::{
    Binding, ClientCertificate, Credential, CredentialKind, CredentialMeta, MemoryVault, Secret,
    Vault as _,
};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{audit_event, journal_dispatches, journal_text};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

const CREDENTIAL: &str = "mtls-api";

/// Who the upstream says the caller is.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "whoami", effect = observe, credential = "mtls-api")]
#[http(get = "/v1/whoami/{probe}", result = Whoami)]
struct WhoAmI {
    probe: String,
}

/// File one report; never resent after it left.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "file_report", effect = external_commitment, reconcile = "whoami",
         credential = "mtls-api")]
#[http(post = "/v1/reports/{report_id}", result = Whoami)]
struct FileReport {
    report_id: String,
}

/// Who the upstream says the caller is, with a second client certificate.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "whoami_b", effect = observe, credential = "mtls-api-b")]
#[http(get = "/v1/whoami/{probe}", result = Whoami)]
struct WhoAmIB {
    probe: String,
}

/// The same upstream, without any credential.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "anonymous_report", effect = external_commitment, reconcile = "whoami")]
#[http(post = "/v1/reports/{report_id}", result = Whoami)]
struct AnonymousReport {
    report_id: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Whoami {
    client: String,
    echo: String,
}

/// A CA made for one test: its certificate (DER) and an issuer for leaf certificates.
struct TestCa {
    der: Vec<u8>,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    fn new(name: &str) -> Self {
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
    fn leaf(&self, names: &[&str], common_name: &str) -> (String, Vec<u8>, String) {
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
struct MtlsUpstream {
    port: u16,
    server_ca: Vec<u8>,
    connections: Arc<AtomicU64>,
    handshakes: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
    echo: Arc<Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MtlsUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MtlsUpstream {
    async fn start(client_ca: &TestCa, tls12_only: bool) -> Self {
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

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

struct Rig {
    executor: Executor,
    vault: Arc<MemoryVault>,
    channel: HttpChannel,
    journal: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn rig(upstream: &MtlsUpstream) -> Rig {
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
    fn set_certificate(&self, upstream: &MtlsUpstream, chain: &str, key: &str) {
        self.set_named_certificate(CREDENTIAL, upstream, chain, key);
    }

    fn set_named_certificate(&self, name: &str, upstream: &MtlsUpstream, chain: &str, key: &str) {
        self.vault.set(
            CredentialMeta::new(
                name,
                CredentialKind::ClientCertificate(ClientCertificate::new(chain)),
                Binding::url(upstream.url()),
            ),
            Secret::new(key),
        );
    }

    async fn call(&self, action: &str, args: serde_json::Value) -> ActionResult {
        self.executor.call(action, args, &Session::new("s1")).await
    }
}

/// The forms of a PEM private key that must never leak: the PEM, its base64 body joined
/// without line breaks, and every line of that body.
fn key_forms(key_pem: &str) -> Vec<String> {
    let lines: Vec<&str> = key_pem
        .lines()
        .filter(|l| !l.starts_with("-----") && !l.is_empty())
        .collect();
    let mut forms = vec![key_pem.to_owned(), lines.concat()];
    forms.extend(lines.iter().map(|l| (*l).to_owned()));
    forms
}

fn assert_no_key(key_pem: &str, text: &str, what: &str) {
    for form in key_forms(key_pem) {
        assert!(
            !text.contains(&form),
            "the private key leaked into {what}: {text}"
        );
    }
}

#[tokio::test]
async fn a_certificate_of_the_trusted_ca_completes_on_one_cached_connection() {
    let client_ca = TestCa::new("sallyport test client CA");
    let upstream = MtlsUpstream::start(&client_ca, false).await;
    let (chain, leaf, key) = client_ca.leaf(&[], "agent-executor");
    let rig = rig(&upstream);
    rig.set_certificate(&upstream, &chain, &key);

    let first = rig.call("whoami", json!({"probe": "p1"})).await;
    assert_eq!(first.status, Status::Completed, "{}", first.to_json());
    assert_eq!(first.data.as_ref().unwrap()["client"], "1 certificates");
    let second = rig.call("file_report", json!({"report_id": "r1"})).await;
    assert_eq!(second.status, Status::Completed, "{}", second.to_json());
    assert_eq!(
        journal_dispatches(&rig.journal, second.attempt_id.as_str()),
        1
    );

    // The server saw exactly the credential's certificate, and both calls used one cached
    // client and its one pooled connection.
    assert_eq!(*upstream.seen.lock().unwrap(), vec![leaf]);
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 2);
    assert_eq!(upstream.handshakes.load(Ordering::SeqCst), 1);
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn two_credentials_and_calls_without_one_never_share_a_connection() {
    let client_ca = TestCa::new("sallyport test client CA");
    let upstream = MtlsUpstream::start(&client_ca, false).await;
    let (chain_a, leaf_a, key_a) = client_ca.leaf(&[], "executor-a");
    let (chain_b, leaf_b, key_b) = client_ca.leaf(&[], "executor-b");
    let rig = rig(&upstream);
    rig.set_certificate(&upstream, &chain_a, &key_a);
    rig.set_named_certificate("mtls-api-b", &upstream, &chain_b, &key_b);

    let a = rig.call("whoami", json!({"probe": "a1"})).await;
    assert_eq!(a.status, Status::Completed, "{}", a.to_json());
    let b = rig.call("whoami_b", json!({"probe": "b1"})).await;
    assert_eq!(b.status, Status::Completed, "{}", b.to_json());
    // Two pooled connections to the same origin, each with its own certificate: the call
    // without a credential rides on neither, and is refused in its own handshake.
    let anonymous = rig
        .call("anonymous_report", json!({"report_id": "r1"}))
        .await;
    assert_eq!(anonymous.code, Some(UpstreamCode::AuthFailed.into()));
    let a_again = rig.call("whoami", json!({"probe": "a2"})).await;
    assert_eq!(a_again.status, Status::Completed, "{}", a_again.to_json());

    assert_eq!(*upstream.seen.lock().unwrap(), vec![leaf_a, leaf_b]);
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 3);
    assert_eq!(upstream.handshakes.load(Ordering::SeqCst), 2);
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_call_without_a_certificate_is_rejected_as_auth_failed_and_the_server_reads_nothing() {
    let client_ca = TestCa::new("sallyport test client CA");
    let upstream = MtlsUpstream::start(&client_ca, false).await;
    let rig = rig(&upstream);
    let r = rig
        .call("anonymous_report", json!({"report_id": "r1"}))
        .await;
    // A commitment: the request may have been written (TLS 1.3 finishes the client's side
    // of the handshake first), but the server refused the handshake and read nothing, so
    // the truth is `rejected`, not `unknown`.
    assert_eq!(r.status, Status::Rejected, "{}", r.to_json());
    assert_eq!(r.code, Some(UpstreamCode::AuthFailed.into()));
    assert_eq!(
        r.reason.as_deref(),
        Some(
            "the upstream requires a TLS client certificate, and this action presents none; it read no request"
        )
    );
    assert!(r.next.is_none());
    let audit = audit_event(&rig.journal, r.attempt_id.as_str());
    assert_eq!(audit["status"], "rejected");
    assert_eq!(audit["code"], "auth_failed");
    assert_eq!(upstream.handshakes.load(Ordering::SeqCst), 0);
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 0);
}

async fn another_ca_is_refused(tls12_only: bool) {
    let client_ca = TestCa::new("sallyport test client CA");
    let other_ca = TestCa::new("some other CA");
    let upstream = MtlsUpstream::start(&client_ca, tls12_only).await;
    let (other_chain, _, other_key) = other_ca.leaf(&[], "agent-executor");
    let rig = rig(&upstream);
    rig.set_certificate(&upstream, &other_chain, &other_key);

    let r = rig.call("file_report", json!({"report_id": "r1"})).await;
    assert_eq!(r.status, Status::Rejected, "{}", r.to_json());
    assert_eq!(r.code, Some(UpstreamCode::AuthFailed.into()));
    assert_eq!(
        r.reason.as_deref(),
        Some(
            "the upstream refused the TLS client certificate of credential `mtls-api` in the handshake and read no request; a human must check or replace it"
        )
    );
    let audit = audit_event(&rig.journal, r.attempt_id.as_str());
    assert_eq!(audit["code"], "auth_failed");
    // TLS 1.2 refuses the certificate before the client's side of the handshake ends:
    // nothing was written. TLS 1.3 ends the client's side first, so the request is written
    // (and counted) before the server's alert arrives; the server reads none of it.
    if tls12_only {
        assert_eq!(audit["dispatches"], 0);
    } else {
        assert!(
            audit["dispatches"].as_u64().is_some_and(|n| n <= 1),
            "{audit}"
        );
    }
    assert_eq!(upstream.handshakes.load(Ordering::SeqCst), 0);
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 0);
    // One connection: a refused certificate is not tried again.
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 1);

    // The credential is marked unusable: the next call is refused here, with nothing sent.
    let again = rig.call("whoami", json!({"probe": "p1"})).await;
    assert_eq!(again.status, Status::Rejected);
    assert_eq!(again.code, Some(RefusalCode::CredentialUnavailable.into()));
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 1);

    // Replaced by a certificate of the trusted CA, the credential works again, on a new
    // client (the refused one is not reused).
    let (chain, leaf, key) = client_ca.leaf(&[], "agent-executor");
    rig.set_certificate(&upstream, &chain, &key);
    let ok = rig.call("whoami", json!({"probe": "p2"})).await;
    assert_eq!(ok.status, Status::Completed, "{}", ok.to_json());
    assert_eq!(*upstream.seen.lock().unwrap(), vec![leaf]);
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 1);

    for text in [r.to_json(), journal_text(&rig.journal)] {
        assert_no_key(&other_key, &text, "a result or the journal");
        assert_no_key(&key, &text, "a result or the journal");
    }
}

#[tokio::test]
async fn a_certificate_of_another_ca_is_rejected_as_auth_failed_never_unknown() {
    another_ca_is_refused(false).await;
}

#[tokio::test]
async fn a_certificate_of_another_ca_is_rejected_as_auth_failed_over_tls_1_2_too() {
    another_ca_is_refused(true).await;
}

#[tokio::test]
async fn a_key_that_is_not_pem_or_not_the_certificates_is_refused_before_anything_is_sent() {
    let client_ca = TestCa::new("sallyport test client CA");
    let upstream = MtlsUpstream::start(&client_ca, false).await;
    let (chain, _, key) = client_ca.leaf(&[], "agent-executor");
    let (_, _, unrelated_key) = client_ca.leaf(&[], "someone else");
    let rig = rig(&upstream);
    let cases = [
        (
            "not a key at all, sk_live_canary_value_123",
            "credential `mtls-api` does not hold a PEM private key (PKCS#8, PKCS#1 or SEC1); nothing was sent",
        ),
        (
            unrelated_key.as_str(),
            "credential `mtls-api` holds a private key that does not match the first certificate of its chain; nothing was sent",
        ),
    ];
    for (secret, reason) in cases {
        rig.set_certificate(&upstream, &chain, secret);
        let r = rig.call("file_report", json!({"report_id": "r1"})).await;
        assert_eq!(r.status, Status::Rejected, "{}", r.to_json());
        assert_eq!(r.code, Some(RefusalCode::CredentialUnavailable.into()));
        assert_eq!(r.reason.as_deref(), Some(reason));
        assert_eq!(journal_dispatches(&rig.journal, r.attempt_id.as_str()), 0);
        assert!(!r.to_json().contains("sk_live_canary_value_123"));
    }
    // A chain that is not PEM certificates (a key where the chain goes).
    rig.set_certificate(
        &upstream,
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        &key,
    );
    let r = rig.call("whoami", json!({"probe": "p1"})).await;
    assert_eq!(r.code, Some(RefusalCode::CredentialUnavailable.into()));
    assert_eq!(
        r.reason.as_deref(),
        Some("credential `mtls-api` holds a certificate chain that is not PEM; nothing was sent")
    );
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 0);
    assert_no_key(&unrelated_key, &journal_text(&rig.journal), "the journal");
    assert_no_key(&key, &journal_text(&rig.journal), "the journal");
}

/// Collects every tracing line written on this thread (the test's current-thread runtime
/// runs the executor, the channel, hyper and rustls on it).
#[derive(Clone, Default)]
struct TraceLines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for TraceLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("trace lines").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_private_key_never_leaks_even_when_the_upstream_echoes_it() {
    let lines = TraceLines::default();
    let writer = lines.clone();
    let _trace = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    );
    let client_ca = TestCa::new("sallyport test client CA");
    let upstream = MtlsUpstream::start(&client_ca, false).await;
    let (chain, _, key) = client_ca.leaf(&[], "agent-executor");
    let rig = rig(&upstream);
    rig.set_certificate(&upstream, &chain, &key);
    let forms = key_forms(&key);
    // A hostile upstream echoes the key: the PEM, then its base64 body on one line.
    let mut texts = Vec::new();
    for echo in [key.clone(), forms[1].clone(), format!("key={}", forms[2])] {
        *upstream.echo.lock().unwrap() = echo;
        let r = rig.call("whoami", json!({"probe": "p1"})).await;
        assert_eq!(r.status, Status::Completed, "{}", r.to_json());
        let echoed = r.data.as_ref().unwrap()["echo"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(echoed.contains("[REDACTED]"), "{echoed}");
        texts.push(r.to_json());
    }
    texts.push(journal_text(&rig.journal));
    let credential: Credential = rig.vault.resolve(CREDENTIAL).await.expect("credential");
    texts.push(format!("{credential:?}"));
    texts.push(format!("{:?}", credential.secret()));
    texts.push(format!("{:?}", rig.channel));
    texts.push(format!("{:?}", rig.vault));
    let trace = String::from_utf8_lossy(&lines.0.lock().expect("trace lines")).into_owned();
    assert!(
        trace.contains("connected to 127.0.0.1"),
        "no TRACE lines: {trace}"
    );
    texts.push(trace);
    for text in &texts {
        assert_no_key(&key, text, "a result, the journal or a Debug output");
    }
}
