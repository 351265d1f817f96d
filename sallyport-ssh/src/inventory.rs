//! The host inventory: every host an action may reach, by name, with its pinned host keys.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use russh::keys::ssh_key::{Algorithm, Fingerprint, HashAlg, PublicKey};

/// Why an inventory could not be built. Never carries a secret (host keys are public).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InventoryError {
    /// Two hosts share a name.
    #[error("host `{0}` is declared twice")]
    DuplicateHost(String),
    /// A host has no pinned host key. There is no trust on first use.
    #[error("host `{0}` has no pinned host key; add its known_hosts line or SHA256: fingerprint")]
    NoHostKey(String),
    /// A host key pin could not be parsed.
    #[error("host `{host}` has a malformed host key pin: {reason}")]
    MalformedHostKey {
        /// The host.
        host: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A host's name, address, user or credential is empty.
    #[error("host `{host}` has an empty {field}")]
    EmptyField {
        /// The host.
        host: String,
        /// The empty field.
        field: &'static str,
    },
}

/// One pinned host key: the full public key, or its SHA-256 fingerprint.
#[derive(Clone, PartialEq, Eq)]
pub enum HostKeyPin {
    /// The full public key (from a known_hosts line or a `.pub` file).
    Key(PublicKey),
    /// The key's SHA-256 fingerprint, as `ssh-keygen -l` prints it (`SHA256:…`).
    Fingerprint(Fingerprint),
}

impl HostKeyPin {
    /// Parses one pin: an OpenSSH known_hosts line (`host[,host] type base64 [comment]`), a
    /// public key line (`type base64 [comment]`), or a fingerprint (`SHA256:base64`).
    ///
    /// Marker lines (`@cert-authority`, `@revoked`) are refused: a pin names one key.
    ///
    /// # Errors
    ///
    /// A short reason when the text is not one of those forms.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() || text.starts_with('#') {
            return Err("the pin is empty".to_owned());
        }
        if text.starts_with("SHA256:") {
            return Fingerprint::from_str(text)
                .map(Self::Fingerprint)
                .map_err(|_| "not a valid SHA256: fingerprint".to_owned());
        }
        let tokens: Vec<&str> = text.split_whitespace().collect();
        if tokens[0].starts_with('@') {
            return Err(format!(
                "known_hosts marker `{}` is not supported; pin the host key itself",
                tokens[0]
            ));
        }
        let start = usize::from(Algorithm::from_str(tokens[0]).is_err());
        let (Some(kind), Some(data)) = (tokens.get(start), tokens.get(start + 1)) else {
            return Err("expected `[hosts] type base64 [comment]`".to_owned());
        };
        let declared =
            Algorithm::from_str(kind).map_err(|_| format!("unknown key type `{kind}`"))?;
        let key = PublicKey::from_openssh(&format!("{kind} {data}"))
            .map_err(|_| format!("the `{kind}` key data is not valid"))?;
        if key.algorithm() != declared {
            return Err(format!(
                "the key data is a `{}` key, not `{kind}`",
                key.algorithm()
            ));
        }
        Ok(Self::Key(key))
    }

    /// Whether `key` is the pinned key.
    pub fn matches(&self, key: &PublicKey) -> bool {
        match self {
            Self::Key(pinned) => pinned.key_data() == key.key_data(),
            Self::Fingerprint(fingerprint) => key.fingerprint(HashAlg::Sha256) == *fingerprint,
        }
    }

    /// The pinned key's SHA-256 fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            Self::Key(key) => key.fingerprint(HashAlg::Sha256),
            Self::Fingerprint(fingerprint) => *fingerprint,
        }
    }
}

impl fmt::Debug for HostKeyPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostKeyPin({})", self.fingerprint())
    }
}

/// One host an action may reach: its inventory name, where it is, which user commands run as,
/// the vault credential bound to that host and user, and its pinned host keys.
///
/// ```
/// use sallyport_ssh::Host;
/// let host = Host::new("web1", "10.0.0.5", "deploy", "web1-deploy-key")
///     .with_port(2222)
///     .with_host_key("SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s");
/// assert_eq!(host.name(), "web1");
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct Host {
    name: String,
    address: String,
    port: u16,
    user: String,
    credential: String,
    pins: Vec<String>,
}

impl Host {
    /// A host named `name` at `address` (port 22), running commands as `user` with the vault
    /// credential `credential` (an SSH key or password bound to this host and user).
    pub fn new(
        name: impl Into<String>,
        address: impl Into<String>,
        user: impl Into<String>,
        credential: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            address: address.into(),
            port: 22,
            user: user.into(),
            credential: credential.into(),
            pins: Vec::new(),
        }
    }

    /// Sets the port.
    pub fn with_port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Pins a host key: a known_hosts line, a public key line or a `SHA256:` fingerprint
    /// (checked by [`InventoryBuilder::build`]). Pin several to allow a key rotation.
    pub fn with_host_key(mut self, pin: impl Into<String>) -> Self {
        self.pins.push(pin.into());
        self
    }

    /// The inventory name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A host after its pins were checked.
#[derive(Clone, Debug)]
pub(crate) struct HostEntry {
    pub(crate) name: String,
    pub(crate) address: String,
    pub(crate) port: u16,
    pub(crate) user: String,
    pub(crate) credential: String,
    pub(crate) pins: Vec<HostKeyPin>,
}

/// The hosts an [`SshChannel`](crate::SshChannel) may reach. Agents name hosts only through
/// this list; an address, user or key never comes from a call's arguments.
#[derive(Clone, Debug)]
pub struct Inventory {
    hosts: BTreeMap<String, HostEntry>,
}

impl Inventory {
    /// A builder.
    pub fn builder() -> InventoryBuilder {
        InventoryBuilder { hosts: Vec::new() }
    }

    /// The host names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.hosts.keys().map(String::as_str)
    }

    pub(crate) fn get(&self, name: &str) -> Option<&HostEntry> {
        self.hosts.get(name)
    }
}

/// Builds an [`Inventory`]; [`InventoryBuilder::build`] checks every host.
#[derive(Debug)]
#[must_use]
pub struct InventoryBuilder {
    hosts: Vec<Host>,
}

impl InventoryBuilder {
    /// Adds a host.
    pub fn host(mut self, host: Host) -> Self {
        self.hosts.push(host);
        self
    }

    /// Builds the inventory.
    ///
    /// # Errors
    ///
    /// [`InventoryError::DuplicateHost`], [`InventoryError::EmptyField`],
    /// [`InventoryError::NoHostKey`] for a host without a pin, and
    /// [`InventoryError::MalformedHostKey`] for a pin that does not parse (corrupt
    /// known_hosts data refuses the whole inventory rather than one connection later).
    pub fn build(self) -> Result<Inventory, InventoryError> {
        let mut hosts = BTreeMap::new();
        for host in self.hosts {
            for (field, value) in [
                ("name", &host.name),
                ("address", &host.address),
                ("user", &host.user),
                ("credential", &host.credential),
            ] {
                if value.trim().is_empty() {
                    return Err(InventoryError::EmptyField {
                        host: host.name.clone(),
                        field,
                    });
                }
            }
            if host.pins.is_empty() {
                return Err(InventoryError::NoHostKey(host.name));
            }
            let pins = host
                .pins
                .iter()
                .map(|pin| HostKeyPin::parse(pin))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|reason| InventoryError::MalformedHostKey {
                    host: host.name.clone(),
                    reason,
                })?;
            if hosts.contains_key(&host.name) {
                return Err(InventoryError::DuplicateHost(host.name));
            }
            hosts.insert(
                host.name.clone(),
                HostEntry {
                    name: host.name,
                    address: host.address,
                    port: host.port,
                    user: host.user,
                    credential: host.credential,
                    pins,
                },
            );
        }
        Ok(Inventory { hosts })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED25519: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

    #[test]
    fn known_hosts_lines_public_key_lines_and_fingerprints_parse_to_the_same_key() {
        let bare = HostKeyPin::parse(ED25519).unwrap();
        let line = HostKeyPin::parse(&format!("[127.0.0.1]:2222,web1 {ED25519} root@x")).unwrap();
        assert_eq!(bare, line);
        let fingerprint = HostKeyPin::parse(&bare.fingerprint().to_string()).unwrap();
        let HostKeyPin::Key(key) = &bare else {
            panic!("expected a key pin")
        };
        assert!(fingerprint.matches(key));
        assert!(bare.matches(key));
    }

    #[test]
    fn corrupt_pins_are_refused_with_a_reason() {
        for (pin, reason) in [
            ("", "the pin is empty"),
            (
                "web1 ssh-ed25519",
                "expected `[hosts] type base64 [comment]`",
            ),
            (
                "ssh-ed25519 AAAAnotbase64!!",
                "the `ssh-ed25519` key data is not valid",
            ),
            ("web1 ssh-foo AAAA", "unknown key type `ssh-foo`"),
            ("SHA256:short", "not a valid SHA256: fingerprint"),
            (
                "@revoked web1 ssh-ed25519 AAAA",
                "known_hosts marker `@revoked` is not supported; pin the host key itself",
            ),
        ] {
            assert_eq!(HostKeyPin::parse(pin), Err(reason.to_owned()), "{pin:?}");
        }
    }

    #[test]
    fn a_host_without_a_pin_is_refused() {
        let err = Inventory::builder()
            .host(Host::new("web1", "127.0.0.1", "root", "key"))
            .build()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "host `web1` has no pinned host key; add its known_hosts line or SHA256: fingerprint"
        );
    }
}
