//! SSH user certificates: for a credential of kind
//! [`SshCertificateAuthority`](sallyport_core::vault::CredentialKind::SshCertificateAuthority),
//! each connection authenticates with a key pair made for it and a short-lived OpenSSH user
//! certificate for that key, signed with the CA key the vault holds.
//!
//! The certificate names one principal, the inventory host's user; it carries no critical
//! options and no extensions, so the session it opens may run commands but gets no PTY, no
//! agent, X11 or port forwarding and no `~/.ssh/rc` (the channel asks for none of them). It
//! is valid from [`BACKDATE`] before now (a server whose clock runs a little behind still
//! accepts it) until the CA's `validity_secs` after now. The ephemeral private key lives
//! only as long as the connection's authentication and is zeroized when dropped.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use russh::keys::ssh_key::certificate::{Builder, CertType};
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{Certificate, PrivateKey, decode_secret_key};
use sallyport_core::vault::{Credential, SshCertificateAuthority};
use zeroize::Zeroizing;

use crate::client::ConnectError;
use crate::inventory::HostEntry;

/// How long before now a certificate becomes valid: tolerates a server clock that runs
/// this much behind.
pub(crate) const BACKDATE: Duration = Duration::from_secs(60);

/// A key pair made for one connection and its certificate.
pub(crate) struct Signed {
    pub(crate) key: PrivateKey,
    pub(crate) certificate: Certificate,
}

impl std::fmt::Debug for Signed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signed")
            .field("key_id", &self.certificate.key_id())
            .field("principals", &self.certificate.valid_principals())
            .finish_non_exhaustive()
    }
}

/// A fresh key pair and a user certificate for it, valid for `host`'s user only, signed by
/// the CA key of `credential`, dated by `now`.
pub(crate) fn sign_for(
    credential: &Credential,
    ca: &SshCertificateAuthority,
    host: &HostEntry,
    now: SystemTime,
) -> Result<Signed, ConnectError> {
    let name = &credential.meta().name;
    let unusable = |what: &str| {
        ConnectError::CredentialUnusable(format!("credential `{name}` {what}; nothing was run"))
    };
    if !(SshCertificateAuthority::MIN_VALIDITY_SECS..=SshCertificateAuthority::MAX_VALIDITY_SECS)
        .contains(&ca.validity_secs)
    {
        return Err(unusable(
            "asks for a certificate validity outside 30-3600 seconds",
        ));
    }
    let secret = credential.secret();
    // The decode error is not passed on: its text could quote the key material.
    let ca_key = decode_secret_key(secret.expose(), secret.expose_passphrase()).map_err(|_| {
        unusable("does not hold a usable OpenSSH CA private key (or its passphrase is wrong)")
    })?;
    let mut seed = Zeroizing::new([0u8; 32]);
    let mut nonce = [0u8; 32];
    let mut serial = [0u8; 8];
    getrandom::fill(seed.as_mut_slice())
        .and_then(|()| getrandom::fill(&mut nonce))
        .and_then(|()| getrandom::fill(&mut serial))
        .map_err(|_| unusable("cannot be used: the system's random source failed"))?;
    let key = PrivateKey::from(Ed25519Keypair::from_seed(&seed));
    let unix = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let valid_after = unix(now.checked_sub(BACKDATE).unwrap_or(UNIX_EPOCH));
    let valid_before = unix(now) + u64::from(ca.validity_secs);
    let mut builder = Builder::new(
        nonce.to_vec(),
        key.public_key().key_data().clone(),
        valid_after,
        valid_before,
    )
    .map_err(|_| unusable("cannot date a certificate"))?;
    builder
        .serial(u64::from_le_bytes(serial))
        .and_then(|b| b.cert_type(CertType::User))
        .and_then(|b| b.key_id(format!("sallyport {name} for {}@{}", host.user, host.name)))
        .and_then(|b| b.valid_principal(host.user.clone()))
        .map_err(|_| unusable("cannot describe a certificate for this host's user"))?;
    let certificate = builder
        .sign(&ca_key)
        .map_err(|_| unusable("holds a CA key that cannot sign a user certificate"))?;
    Ok(Signed { key, certificate })
}

#[cfg(test)]
mod tests {
    use super::*;
    use russh::keys::ssh_key::{Algorithm, HashAlg, LineEnding};
    use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, Secret};

    use crate::inventory::Inventory;

    fn host() -> HostEntry {
        let inventory = Inventory::builder()
            .host(
                crate::Host::new("web1", "127.0.0.1", "deploy", "web-ca")
                    .with_host_key("SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s"),
            )
            .build()
            .expect("inventory");
        inventory.get("web1").expect("web1").clone()
    }

    fn ca_credential(key: &str, validity: u32) -> (Credential, SshCertificateAuthority) {
        let ca = SshCertificateAuthority::new().with_validity_secs(validity);
        let meta = CredentialMeta::new(
            "web-ca",
            CredentialKind::SshCertificateAuthority(ca.clone()),
            Binding::ssh("web1", "deploy"),
        );
        (Credential::new(meta, Secret::new(key)), ca)
    }

    fn ca_key() -> PrivateKey {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("random");
        PrivateKey::from(Ed25519Keypair::from_seed(&seed))
    }

    #[test]
    fn the_certificate_is_a_user_certificate_for_the_hosts_user_only_and_short_lived() {
        let ca = ca_key();
        let pem = ca.to_openssh(LineEnding::LF).expect("encode");
        let (credential, config) = ca_credential(&pem, 300);
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let signed = sign_for(&credential, &config, &host(), now).expect("signed");
        let cert = &signed.certificate;
        assert_eq!(cert.cert_type(), CertType::User);
        assert_eq!(cert.valid_principals(), ["deploy".to_owned()]);
        assert_eq!(cert.valid_after(), 1_800_000_000 - 60);
        assert_eq!(cert.valid_before(), 1_800_000_000 + 300);
        assert!(cert.critical_options().is_empty());
        assert!(cert.extensions().is_empty());
        assert_eq!(cert.key_id(), "sallyport web-ca for deploy@web1");
        // Signed by the CA, for the ephemeral key.
        let ca_fingerprint = ca.public_key().fingerprint(HashAlg::Sha256);
        assert_eq!(
            cert.signature_key().fingerprint(HashAlg::Sha256),
            ca_fingerprint
        );
        cert.validate_at(1_800_000_000, &[ca_fingerprint])
            .expect("valid now for its CA");
        assert!(
            cert.validate_at(1_800_000_000 + 301, &[ca_fingerprint])
                .is_err()
        );
        assert_eq!(cert.public_key(), signed.key.public_key().key_data());
        assert_eq!(signed.key.algorithm(), Algorithm::Ed25519);
        // Each connection gets its own key pair.
        let again = sign_for(&credential, &config, &host(), now).expect("signed");
        assert_ne!(again.key.public_key(), signed.key.public_key());
        // The Debug output names the certificate, never a key.
        let debug = format!("{signed:?}");
        assert!(debug.starts_with("Signed { key_id: \"sallyport web-ca for deploy@web1\""));
        assert!(!debug.contains(pem.lines().nth(1).expect("a key line")));
    }

    #[test]
    fn a_key_that_is_not_an_openssh_key_or_a_validity_out_of_range_is_unusable() {
        let (credential, config) = ca_credential("not a key, ssh_canary_value_77", 300);
        let Err(ConnectError::CredentialUnusable(reason)) =
            sign_for(&credential, &config, &host(), SystemTime::now())
        else {
            panic!("a bad key is unusable");
        };
        assert_eq!(
            reason,
            "credential `web-ca` does not hold a usable OpenSSH CA private key (or its passphrase is wrong); nothing was run"
        );
        let pem = ca_key().to_openssh(LineEnding::LF).expect("encode");
        let (credential, config) = ca_credential(&pem, 86_400);
        let Err(ConnectError::CredentialUnusable(reason)) =
            sign_for(&credential, &config, &host(), SystemTime::now())
        else {
            panic!("a day-long validity is refused");
        };
        assert!(reason.contains("outside 30-3600 seconds"), "{reason}");
    }
}
