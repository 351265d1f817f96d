//! Credential kinds, bindings and the secret-holding [`Credential`] type.

use std::fmt;
use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::grant::{GrantKey, GrantStore};

/// Where an API key goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "in", content = "name", rename_all = "snake_case")]
pub enum ApiKeyPlacement {
    /// In the named header.
    Header(String),
    /// In the named query parameter.
    Query(String),
}

/// What kind of credential a name holds (metadata; no value).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CredentialKind {
    /// `Authorization: Bearer …`.
    Bearer,
    /// HTTP basic authentication.
    Basic {
        /// The user name (not secret).
        user: String,
    },
    /// An API key in a header or the query.
    ApiKey {
        /// Where it goes.
        placement: ApiKeyPlacement,
    },
    /// An SSH private key (OpenSSH format), with an optional passphrase.
    SshKey,
    /// An SSH password.
    SshPassword,
    /// OAuth 2.0 client credentials (RFC 6749 §4.4): the value is the client secret; the
    /// channel asks the token endpoint for an access token and attaches it as
    /// `Authorization: Bearer …`, refreshing it ahead of its expiry.
    #[serde(rename = "oauth_client_credentials")]
    OAuthClientCredentials(OAuthClient),
    /// OAuth 2.0 authorization code grant with PKCE S256 (RFC 6749 §4.1, RFC 7636) and a
    /// refresh token: the value is the client secret (empty for a public client); the grant's
    /// refresh token is exchanged for access tokens, which the channel attaches as
    /// `Authorization: Bearer …`.
    #[serde(rename = "oauth_refresh")]
    OAuthRefresh(OAuthClient),
    /// A TLS client certificate (mutual TLS): the value is the PEM private key (PKCS#8,
    /// PKCS#1 or SEC1); the configuration holds the PEM certificate chain, leaf first. The
    /// HTTP channel presents it in the TLS handshake with the bound base URLs, on connections
    /// of their own (never shared with another credential or with calls without one).
    #[serde(rename = "client_certificate")]
    ClientCertificate(ClientCertificate),
    /// An OpenSSH certificate authority: the value is the CA's OpenSSH private key (with its
    /// passphrase, if any). For each SSH connection it opens, the SSH channel makes a fresh
    /// key pair and signs a short-lived user certificate for it, valid for the inventory
    /// host's user only; the server trusts the CA (`TrustedUserCAKeys`).
    #[serde(rename = "ssh_certificate_authority")]
    SshCertificateAuthority(SshCertificateAuthority),
}

impl CredentialKind {
    /// Whether the credential is held for each subject (an OAuth credential configured
    /// [`per_subject`](OAuthClient::per_subject)).
    pub fn per_subject(&self) -> bool {
        self.oauth().is_some_and(|c| c.per_subject)
    }

    /// Whether the credential is used by the SSH channel (bound to SSH hosts and users, never
    /// to URLs): an SSH key, an SSH password or an SSH certificate authority.
    pub fn is_ssh(&self) -> bool {
        matches!(
            self,
            Self::SshKey | Self::SshPassword | Self::SshCertificateAuthority(_)
        )
    }

    /// The OAuth client configuration, for the two OAuth kinds.
    pub fn oauth(&self) -> Option<&OAuthClient> {
        match self {
            Self::OAuthClientCredentials(c) | Self::OAuthRefresh(c) => Some(c),
            _ => None,
        }
    }
}

/// How an OAuth credential reaches its token endpoint: part of the credential's
/// configuration, set by whoever stores the credential, never nameable by an action or the
/// agent.
///
/// # Token lifetimes
///
/// The HTTP channel (`sallyport_http::oauth`) uses an access token for the lifetime the
/// token endpoint gives in `expires_in`, less one second (providers count it on their own
/// clock's whole seconds, so a token may die up to a second early), and refreshes it when a
/// third of that (at most 30 s) is left. A token issued **without `expires_in`** is taken to
/// live **5 minutes** (`sallyport_http::oauth::DEFAULT_LIFETIME`); an upstream's `401`
/// before then makes the next call refresh it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OAuthClient {
    /// The client id (not secret).
    pub client_id: String,
    /// The token endpoint: `https://`, or `http://` on loopback.
    pub token_endpoint: String,
    /// The scopes to ask for (client credentials) or to narrow a refresh to; empty asks for
    /// the client's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Held for each subject: every end user connects their own account, and a call uses
    /// the grant of its session's subject ([`Session::for_subject`](crate::session::Session::for_subject)),
    /// never another's. `false` (the default, not serialized) keeps one grant shared by
    /// every caller.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_subject: bool,
    /// The revocation endpoint (RFC 7009) a disconnect revokes the grant's tokens at:
    /// `https://`, or `http://` on loopback (it receives the client secret). `None` (the
    /// default, not serialized) when the provider has none: a disconnect then only removes
    /// the grant here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocation_endpoint: Option<String>,
    /// The authorization endpoint (RFC 6749 §3.1) a human is sent to when they connect an
    /// account (the authorization code grant): `https://`, or `http://` on loopback. `None`
    /// (the default, not serialized) when accounts are not connected through sallyport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_endpoint: Option<String>,
}

impl OAuthClient {
    /// A client `client_id` of the token endpoint `token_endpoint`, asking for no scope in
    /// particular.
    pub fn new(client_id: impl Into<String>, token_endpoint: impl Into<String>) -> Self {
        Self {
            client_id: client_id.into(),
            token_endpoint: token_endpoint.into(),
            scopes: Vec::new(),
            per_subject: false,
            revocation_endpoint: None,
            authorization_endpoint: None,
        }
    }

    /// Sends a human connecting an account to `endpoint` (RFC 6749 §3.1), where they log in
    /// and grant access.
    #[must_use]
    pub fn with_authorization_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.authorization_endpoint = Some(endpoint.into());
        self
    }

    /// Revokes the grant's tokens at `endpoint` (RFC 7009) when an account is disconnected.
    #[must_use]
    pub fn with_revocation_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.revocation_endpoint = Some(endpoint.into());
        self
    }

    /// Holds a grant for each subject (end user) instead of one shared grant: a call
    /// resolves to the grant of its session's subject, and is refused with
    /// `credential_unavailable` when that user has not connected the account.
    #[must_use]
    pub fn per_subject(mut self) -> Self {
        self.per_subject = true;
        self
    }

    /// Asks for these scopes.
    #[must_use]
    pub fn with_scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }
}

/// The public half of a [`CredentialKind::ClientCertificate`]: the certificate chain the
/// channel presents with the private key the vault holds.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ClientCertificate {
    /// The PEM certificate chain, leaf first (`-----BEGIN CERTIFICATE-----` blocks). Not
    /// secret: a server sees it in every handshake.
    pub certificate_chain: String,
}

impl ClientCertificate {
    /// A client certificate whose chain is `certificate_chain` (PEM, leaf first).
    pub fn new(certificate_chain: impl Into<String>) -> Self {
        Self {
            certificate_chain: certificate_chain.into(),
        }
    }

    /// How many PEM certificates the chain holds.
    pub fn certificate_count(&self) -> usize {
        self.certificate_chain
            .matches("-----BEGIN CERTIFICATE-----")
            .count()
    }
}

impl fmt::Debug for ClientCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The chain is public, but long: its size says enough in a debug line.
        f.debug_struct("ClientCertificate")
            .field("certificates", &self.certificate_count())
            .finish_non_exhaustive()
    }
}

/// How an [`CredentialKind::SshCertificateAuthority`] signs the user certificates the SSH
/// channel authenticates with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SshCertificateAuthority {
    /// How long each certificate is valid, in seconds: from
    /// [`MIN_VALIDITY_SECS`](Self::MIN_VALIDITY_SECS) to
    /// [`MAX_VALIDITY_SECS`](Self::MAX_VALIDITY_SECS), [`DEFAULT_VALIDITY_SECS`](Self::DEFAULT_VALIDITY_SECS)
    /// when not given. A certificate is needed only while a connection authenticates; the
    /// connection outlives it.
    #[serde(default = "SshCertificateAuthority::default_validity")]
    pub validity_secs: u32,
}

impl SshCertificateAuthority {
    /// The validity when none is given: five minutes.
    pub const DEFAULT_VALIDITY_SECS: u32 = 300;
    /// The shortest validity accepted.
    pub const MIN_VALIDITY_SECS: u32 = 30;
    /// The longest validity accepted: one hour (the certificates are short-lived by design).
    pub const MAX_VALIDITY_SECS: u32 = 3600;

    /// A CA whose certificates are valid for [`DEFAULT_VALIDITY_SECS`](Self::DEFAULT_VALIDITY_SECS).
    pub fn new() -> Self {
        Self {
            validity_secs: Self::DEFAULT_VALIDITY_SECS,
        }
    }

    /// Certificates valid for `secs` seconds (checked when the credential is stored).
    #[must_use]
    pub fn with_validity_secs(mut self, secs: u32) -> Self {
        self.validity_secs = secs;
        self
    }

    fn default_validity() -> u32 {
        Self::DEFAULT_VALIDITY_SECS
    }
}

impl Default for SshCertificateAuthority {
    fn default() -> Self {
        Self::new()
    }
}

/// An SSH host and user a credential may be used for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SshBinding {
    /// The inventory host name.
    pub host: String,
    /// The remote user.
    pub user: String,
}

/// Where a credential may be used. Channels refuse to attach it anywhere else.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// HTTP(S) base URLs (scheme, host, port and path prefix).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
    /// SSH host and user pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh: Vec<SshBinding>,
}

impl Binding {
    /// A binding to one base URL.
    pub fn url(url: impl Into<String>) -> Self {
        Self {
            urls: vec![url.into()],
            ssh: Vec::new(),
        }
    }

    /// A binding to one SSH host and user.
    pub fn ssh(host: impl Into<String>, user: impl Into<String>) -> Self {
        Self {
            urls: Vec::new(),
            ssh: vec![SshBinding {
                host: host.into(),
                user: user.into(),
            }],
        }
    }
}

/// A credential's metadata: everything but the value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialMeta {
    /// The name actions bind to.
    pub name: String,
    /// The kind.
    pub kind: CredentialKind,
    /// Where it may be used.
    pub binding: Binding,
    /// Incremented on every rotation.
    pub version: u64,
}

impl CredentialMeta {
    /// Metadata for a new credential (version 1; vaults assign versions on write).
    pub fn new(name: impl Into<String>, kind: CredentialKind, binding: Binding) -> Self {
        Self {
            name: name.into(),
            kind,
            binding,
            version: 1,
        }
    }
}

/// A secret value. Not `Serialize`, not `Display`; `Debug` prints `Secret(..)`; zeroized on
/// drop.
pub struct Secret {
    primary: SecretString,
    passphrase: Option<SecretString>,
}

impl Secret {
    /// A secret from a string.
    pub fn new(value: impl Into<String>) -> Self {
        Self {
            primary: SecretString::from(value.into()),
            passphrase: None,
        }
    }

    /// Adds a passphrase (for an encrypted SSH private key).
    #[must_use]
    pub fn with_passphrase(mut self, passphrase: impl Into<String>) -> Self {
        self.passphrase = Some(SecretString::from(passphrase.into()));
        self
    }

    /// The value, for a channel that attaches it. Do not log or return it.
    pub fn expose(&self) -> &str {
        self.primary.expose_secret()
    }

    /// The passphrase, if any.
    pub fn expose_passphrase(&self) -> Option<&str> {
        self.passphrase.as_ref().map(ExposeSecret::expose_secret)
    }
}

impl Clone for Secret {
    fn clone(&self) -> Self {
        Self {
            primary: SecretString::from(self.primary.expose_secret().to_owned()),
            passphrase: self
                .passphrase
                .as_ref()
                .map(|p| SecretString::from(p.expose_secret().to_owned())),
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A resolved credential: metadata plus the secret, handed to a channel at dispatch. An
/// OAuth credential also carries the store its grant lives in ([`Credential::grants`]), so
/// the channel reads the current access token at send time and stores refreshed ones.
#[derive(Clone)]
pub struct Credential {
    meta: CredentialMeta,
    secret: Secret,
    grants: Option<Arc<dyn GrantStore>>,
    subject: Option<String>,
}

impl Credential {
    /// A credential from its metadata and secret.
    pub fn new(meta: CredentialMeta, secret: Secret) -> Self {
        Self {
            meta,
            secret,
            grants: None,
            subject: None,
        }
    }

    /// The credential as resolved for `subject` (by the executor, for a credential held for
    /// each subject): its grant is that subject's.
    #[must_use]
    pub fn with_subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// The subject this credential was resolved for; `None` for a shared or static one.
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }

    /// Which grant of [`Credential::grants`] a channel reads and refreshes: the subject's,
    /// when the credential was resolved for one, else the credential's shared grant.
    pub fn grant_key(&self) -> GrantKey {
        match &self.subject {
            Some(subject) => GrantKey::for_subject(self.meta.name.as_str(), subject.as_str()),
            None => GrantKey::shared(self.meta.name.as_str()),
        }
    }

    /// The credential with the store its OAuth grant lives in (for vault implementations).
    #[must_use]
    pub fn with_grants(mut self, grants: Arc<dyn GrantStore>) -> Self {
        self.grants = Some(grants);
        self
    }

    /// The store of this credential's OAuth grant; `None` for other kinds, and for OAuth
    /// credentials of a vault that keeps no grants (the channel then refuses them).
    pub fn grants(&self) -> Option<&Arc<dyn GrantStore>> {
        self.grants.as_ref()
    }

    /// The metadata.
    pub fn meta(&self) -> &CredentialMeta {
        &self.meta
    }

    /// The secret.
    pub fn secret(&self) -> &Secret {
        &self.secret
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("Credential");
        out.field("name", &self.meta.name)
            .field("kind", &self.meta.kind)
            .field("version", &self.meta.version);
        // Only when resolved for a subject, so a static credential prints as it always did.
        if let Some(subject) = &self.subject {
            out.field("subject", subject);
        }
        out.finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vault::check_meta;

    const CHAIN: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n";

    #[test]
    fn the_new_kinds_serialize_flat_beside_their_tag_and_the_old_ones_as_before() {
        let cert = CredentialKind::ClientCertificate(ClientCertificate::new(CHAIN));
        assert_eq!(
            serde_json::to_value(&cert).unwrap(),
            serde_json::json!({"kind": "client_certificate", "certificate_chain": CHAIN})
        );
        let ca = CredentialKind::SshCertificateAuthority(
            SshCertificateAuthority::new().with_validity_secs(120),
        );
        assert_eq!(
            serde_json::to_value(&ca).unwrap(),
            serde_json::json!({"kind": "ssh_certificate_authority", "validity_secs": 120})
        );
        // Without a validity, the default.
        let read: CredentialKind =
            serde_json::from_value(serde_json::json!({"kind": "ssh_certificate_authority"}))
                .unwrap();
        assert_eq!(
            read,
            CredentialKind::SshCertificateAuthority(SshCertificateAuthority::new())
        );
        assert_eq!(
            SshCertificateAuthority::new().validity_secs,
            SshCertificateAuthority::DEFAULT_VALIDITY_SECS
        );
        assert_eq!(
            serde_json::to_value(CredentialKind::SshKey).unwrap(),
            serde_json::json!({"kind": "ssh_key"})
        );
        assert_eq!(
            serde_json::to_value(CredentialKind::Bearer).unwrap(),
            serde_json::json!({"kind": "bearer"})
        );
    }

    #[test]
    fn an_oauth_client_without_a_revocation_endpoint_serializes_as_before() {
        let plain = CredentialKind::OAuthRefresh(
            OAuthClient::new("webapp", "https://id.example.com/token").per_subject(),
        );
        let json = serde_json::json!({
            "kind": "oauth_refresh",
            "client_id": "webapp",
            "token_endpoint": "https://id.example.com/token",
            "per_subject": true
        });
        assert_eq!(serde_json::to_value(&plain).unwrap(), json);
        assert_eq!(
            serde_json::from_value::<CredentialKind>(json).unwrap(),
            plain
        );
        let revocable = CredentialKind::OAuthRefresh(
            OAuthClient::new("webapp", "https://id.example.com/token")
                .with_revocation_endpoint("https://id.example.com/revoke"),
        );
        let json = serde_json::to_value(&revocable).unwrap();
        assert_eq!(json["revocation_endpoint"], "https://id.example.com/revoke");
        assert_eq!(
            serde_json::from_value::<CredentialKind>(json).unwrap(),
            revocable
        );
    }

    #[test]
    fn an_oauth_client_without_an_authorization_endpoint_serializes_as_before() {
        let plain = CredentialKind::OAuthRefresh(
            OAuthClient::new("webapp", "https://id.example.com/token")
                .with_scopes(["api:read"])
                .with_revocation_endpoint("https://id.example.com/revoke"),
        );
        let json = serde_json::json!({
            "kind": "oauth_refresh",
            "client_id": "webapp",
            "token_endpoint": "https://id.example.com/token",
            "scopes": ["api:read"],
            "revocation_endpoint": "https://id.example.com/revoke"
        });
        assert_eq!(serde_json::to_value(&plain).unwrap(), json);
        assert_eq!(
            serde_json::from_value::<CredentialKind>(json).unwrap(),
            plain
        );
        let connectable = CredentialKind::OAuthRefresh(
            OAuthClient::new("webapp", "https://id.example.com/token")
                .with_authorization_endpoint("https://id.example.com/auth"),
        );
        let json = serde_json::to_value(&connectable).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "kind": "oauth_refresh",
                "client_id": "webapp",
                "token_endpoint": "https://id.example.com/token",
                "authorization_endpoint": "https://id.example.com/auth"
            })
        );
        assert_eq!(
            serde_json::from_value::<CredentialKind>(json).unwrap(),
            connectable
        );
    }

    #[test]
    fn the_certificate_authority_is_an_ssh_kind_and_the_client_certificate_is_not() {
        assert!(CredentialKind::SshCertificateAuthority(SshCertificateAuthority::new()).is_ssh());
        assert!(CredentialKind::SshKey.is_ssh());
        assert!(CredentialKind::SshPassword.is_ssh());
        assert!(!CredentialKind::ClientCertificate(ClientCertificate::new(CHAIN)).is_ssh());
        assert!(!CredentialKind::Bearer.is_ssh());
    }

    #[test]
    fn a_client_certificate_prints_its_size_and_its_credential_no_key() {
        let key = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIKEYMATERIALCANARY\n-----END PRIVATE KEY-----\n";
        let meta = CredentialMeta::new(
            "mtls",
            CredentialKind::ClientCertificate(ClientCertificate::new(CHAIN)),
            Binding::url("https://api.example.com"),
        );
        let credential = Credential::new(meta, Secret::new(key));
        let debug = format!("{credential:?}");
        assert_eq!(
            debug,
            "Credential { name: \"mtls\", kind: ClientCertificate(ClientCertificate { certificates: 2, .. }), version: 1, .. }"
        );
        assert!(!debug.contains("KEYMATERIALCANARY"));
    }

    #[test]
    fn the_vault_checks_refuse_a_chain_without_certificates_and_a_long_validity() {
        let cert = |chain: &str| {
            CredentialMeta::new(
                "mtls",
                CredentialKind::ClientCertificate(ClientCertificate::new(chain)),
                Binding::url("https://api.example.com"),
            )
        };
        assert!(check_meta(&cert(CHAIN)).is_ok());
        let err = check_meta(&cert("not pem")).unwrap_err();
        assert!(err.to_string().contains("BEGIN CERTIFICATE"), "{err}");
        // An HTTP kind: bound to URLs, not SSH hosts.
        let mut on_ssh = cert(CHAIN);
        on_ssh.binding = Binding::ssh("web1", "root");
        assert!(check_meta(&on_ssh).is_err());

        let ca = |secs: u32| {
            CredentialMeta::new(
                "web-ca",
                CredentialKind::SshCertificateAuthority(
                    SshCertificateAuthority::new().with_validity_secs(secs),
                ),
                Binding::ssh("web1", "root"),
            )
        };
        assert!(check_meta(&ca(300)).is_ok());
        assert!(check_meta(&ca(30)).is_ok());
        assert!(check_meta(&ca(3600)).is_ok());
        for bad in [0, 29, 3601, 86_400] {
            let err = check_meta(&ca(bad)).unwrap_err();
            assert!(err.to_string().contains("validity_secs"), "{bad}: {err}");
        }
        // An SSH kind: bound to SSH hosts, not URLs.
        let mut on_url = ca(300);
        on_url.binding = Binding::url("https://api.example.com");
        assert!(check_meta(&on_url).is_err());
    }
}
