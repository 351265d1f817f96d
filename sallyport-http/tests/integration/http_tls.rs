//! A TLS trust failure against a real TLS server on 127.0.0.1:0 whose certificate chains to a
//! throwaway CA (`sallyport-http/tests/fixtures/tls/`) that the executor does not trust: the
//! agent is told the certificate is not trusted and that nothing was sent, the server receives
//! no HTTP request, and nothing is resent. With the CA added as a root, the same server
//! answers, so the refusal is about trust and nothing else.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sallyport_core::code::UpstreamCode;
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::{HttpChannel, HttpChannelBuilder};
use sallyport_tests::http_server::{audit_event, journal_dispatches};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

const CA: &[u8] = include_bytes!("../fixtures/tls/ca.der");
const LEAF: &[u8] = include_bytes!("../fixtures/tls/leaf.der");
const LEAF_KEY: &[u8] = include_bytes!("../fixtures/tls/leaf-key.der");

/// Read one invoice.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe)]
#[http(get = "/v1/invoices/{invoice_id}", result = ())]
struct GetInvoice {
    invoice_id: String,
}

/// Send one invoice to the customer.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "send_invoice", effect = external_commitment, reconcile = "get_invoice")]
#[http(post = "/v1/invoices/{invoice_id}/send", result = ())]
struct SendInvoice {
    invoice_id: String,
}

/// A TLS server that counts TCP connections, completed handshakes and HTTP requests, and
/// answers every request `200 {}`.
struct TlsUpstream {
    port: u16,
    connections: Arc<AtomicU64>,
    handshakes: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsUpstream {
    async fn start() -> Self {
        #[allow(
            deprecated,
            reason = "ring, as sallyport-http's channel: rustls 0.23.48 names no replacement that keeps ring"
        )]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(LEAF_KEY.to_vec().into());
        let chain = vec![
            rustls::pki_types::CertificateDer::from(LEAF.to_vec()),
            rustls::pki_types::CertificateDer::from(CA.to_vec()),
        ];
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server certificate");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let connections = Arc::new(AtomicU64::new(0));
        let handshakes = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(AtomicU64::new(0));
        let (c, h, r) = (
            Arc::clone(&connections),
            Arc::clone(&handshakes),
            Arc::clone(&requests),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                c.fetch_add(1, Ordering::SeqCst);
                let (acceptor, h, r) = (acceptor.clone(), Arc::clone(&h), Arc::clone(&r));
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    h.fetch_add(1, Ordering::SeqCst);
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    r.fetch_add(1, Ordering::SeqCst);
                    let _ = tls
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
                        )
                        .await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        Self {
            port,
            connections,
            handshakes,
            requests,
            task,
        }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

struct Rig {
    executor: Executor,
    journal: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn rig(configure: impl FnOnce(HttpChannelBuilder) -> HttpChannelBuilder, base: &str) -> Rig {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let channel = configure(
        HttpChannel::builder()
            .base_url(base)
            .backoff(Duration::from_millis(5), Duration::from_millis(20)),
    )
    .build()
    .expect("channel");
    let catalog = Catalog::builder()
        .action::<GetInvoice>()
        .action::<SendInvoice>()
        .build()
        .expect("catalog");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(&journal).expect("journal"))
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .channel(channel)
        .build()
        .expect("executor");
    Rig {
        executor,
        journal,
        _dir: dir,
    }
}

#[tokio::test]
async fn an_untrusted_certificate_is_reported_as_tls_untrusted_and_no_request_reaches_the_server() {
    let upstream = TlsUpstream::start().await;
    let rig = rig(|b| b, &upstream.url());
    let session = Session::new("s1");
    for (n, action) in (1u64..).zip(["get_invoice", "send_invoice"]) {
        let r = rig
            .executor
            .call(action, json!({"invoice_id": "inv_1"}), &session)
            .await;
        assert_eq!(r.status, Status::Rejected, "{action}: {}", r.to_json());
        assert_eq!(r.code, Some(UpstreamCode::TlsUntrusted.into()), "{action}");
        assert_eq!(
            r.reason.as_deref(),
            Some("the upstream's certificate is not trusted by this executor; nothing was sent"),
            "{action}"
        );
        assert!(r.next.is_none(), "{action}");
        assert_eq!(
            journal_dispatches(&rig.journal, r.attempt_id.as_str()),
            0,
            "{action}"
        );
        let audit = audit_event(&rig.journal, r.attempt_id.as_str());
        assert_eq!(audit["code"], "tls_untrusted", "{action}");
        assert_eq!(audit["dispatches"], 0, "{action}");
        // One TCP connection per call: a certificate that is not trusted is not tried again.
        assert_eq!(upstream.connections.load(Ordering::SeqCst), n, "{action}");
    }
    assert_eq!(upstream.handshakes.load(Ordering::SeqCst), 0);
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_same_server_answers_once_its_ca_is_trusted() {
    let upstream = TlsUpstream::start().await;
    let rig = rig(|b| b.add_root_certificate(CA), &upstream.url());
    let r = rig
        .executor
        .call(
            "send_invoice",
            json!({"invoice_id": "inv_1"}),
            &Session::new("s1"),
        )
        .await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(journal_dispatches(&rig.journal, r.attempt_id.as_str()), 1);
    assert_eq!(upstream.handshakes.load(Ordering::SeqCst), 1);
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 1);
}
