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
//! result, journal row, audit record or `Debug` output (`tests/mtls_trace.rs` reads every
//! TRACE line of the same calls).

use std::sync::atomic::Ordering;

use sallyport_core::Status;
use sallyport_core::code::{RefusalCode, UpstreamCode};
use sallyport_core::vault::{Credential, Vault as _};
use sallyport_tests::http_server::{audit_event, journal_dispatches, journal_text};
use serde_json::json;

use crate::mtls_rig::{CREDENTIAL, MtlsUpstream, TestCa, assert_no_key, key_forms, rig};

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

#[tokio::test]
async fn the_private_key_never_leaks_even_when_the_upstream_echoes_it() {
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
    for text in &texts {
        assert_no_key(&key, text, "a result, the journal or a Debug output");
    }
}
