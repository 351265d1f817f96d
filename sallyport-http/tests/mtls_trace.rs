//! The mTLS calls with every tracing line of this process captured at TRACE (a global
//! subscriber, so this is a test binary of its own): a completed call whose answer echoes the
//! key, a certificate of another CA refused in the handshake, a call without a certificate,
//! and a key that is not PEM. The private key, in PEM, as its base64 body or line by line,
//! appears in none of the lines.

#[path = "integration/mtls_rig.rs"]
mod mtls_rig;

use std::io::Write;
use std::sync::{Arc, Mutex};

use sallyport_core::Status;
use sallyport_core::code::{RefusalCode, UpstreamCode};
use serde_json::json;

use crate::mtls_rig::{MtlsUpstream, TestCa, assert_no_key, key_forms, rig};

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("sink").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn no_trace_line_carries_the_client_certificate_key() {
    let sink = Sink::default();
    let writer = sink.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .expect("the only subscriber of this binary");

    let client_ca = TestCa::new("sallyport test client CA");
    let other_ca = TestCa::new("some other CA");
    let upstream = MtlsUpstream::start(&client_ca, false).await;
    let (chain, _, key) = client_ca.leaf(&[], "agent-executor");
    let (other_chain, _, other_key) = other_ca.leaf(&[], "agent-executor");
    let rig = rig(&upstream);

    rig.set_certificate(&upstream, &chain, &key);
    *upstream.echo.lock().unwrap() = key_forms(&key)[1].clone();
    let ok = rig.call("whoami", json!({"probe": "p1"})).await;
    assert_eq!(ok.status, Status::Completed, "{}", ok.to_json());

    let anonymous = rig
        .call("anonymous_report", json!({"report_id": "r1"}))
        .await;
    assert_eq!(anonymous.code, Some(UpstreamCode::AuthFailed.into()));

    rig.set_certificate(&upstream, &chain, "not a PEM key");
    let bad = rig.call("whoami", json!({"probe": "p2"})).await;
    assert_eq!(bad.code, Some(RefusalCode::CredentialUnavailable.into()));

    rig.set_certificate(&upstream, &other_chain, &other_key);
    let refused = rig.call("file_report", json!({"report_id": "r2"})).await;
    assert_eq!(refused.code, Some(UpstreamCode::AuthFailed.into()));

    let logs = String::from_utf8_lossy(&sink.0.lock().expect("sink")).into_owned();
    // The lines are there: the connections, and the refused handshakes' transport errors.
    assert!(logs.contains("connected to 127.0.0.1"), "{logs}");
    assert!(logs.contains("HTTP exchange failed"), "{logs}");
    assert_no_key(&key, &logs, "a TRACE line");
    assert_no_key(&other_key, &logs, "a TRACE line");
}
