//! Connections: the russh client handler (host key pinning, refusing everything the server
//! opens towards us), connecting and authenticating, and the pool of authenticated sessions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use russh::Channel;
use russh::client::{self, ChannelOpenHandle, Handle, Msg, Session};
use russh::keys::ssh_key::HashAlg;
use russh::keys::{PrivateKeyWithHashAlg, PublicKeyOrCertificate, decode_secret_key};
use sallyport_core::vault::{Credential, CredentialKind};

use crate::certificate::{self, Signed};
use crate::inventory::{HostEntry, HostKeyPin};

/// Why no authenticated session could be had. Never carries a secret.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// TCP connect failed.
    Unreachable(String),
    /// Connect, handshake or authentication took longer than the connect timeout.
    Timeout,
    /// The server's host key is not pinned (unknown or changed).
    HostKeyMismatch(String),
    /// The SSH handshake failed for another reason.
    Handshake(String),
    /// The server rejected the credential.
    AuthRejected,
    /// The credential cannot be used (a private key that does not decode, a wrong kind).
    CredentialUnusable(String),
}

/// What the handler saw of the server's host key.
#[derive(Debug, Default)]
struct KeyCheck {
    mismatch: Option<String>,
}

/// The russh client handler: checks the host key against the pins and refuses every channel
/// the server opens towards the client (forwarded TCP/Unix sockets, agent, X11, sessions).
pub(crate) struct Client {
    pins: Arc<[HostKeyPin]>,
    check: Arc<Mutex<KeyCheck>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("pins", &self.pins)
            .finish_non_exhaustive()
    }
}

impl client::Handler for Client {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        server_public_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let (accepted, seen) = match server_public_key {
            PublicKeyOrCertificate::PublicKey { key, .. } => (
                self.pins.iter().any(|pin| pin.matches(key)),
                key.fingerprint(HashAlg::Sha256).to_string(),
            ),
            // A host certificate is not a pinned key; certificates are not supported.
            PublicKeyOrCertificate::Certificate(cert) => (
                false,
                format!(
                    "a host certificate for {}",
                    cert.public_key().fingerprint(HashAlg::Sha256)
                ),
            ),
        };
        if !accepted {
            self.check
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .mismatch = Some(seen);
        }
        Ok(accepted)
    }

    async fn server_channel_open_forwarded_tcpip(
        &mut self,
        _channel: Channel<Msg>,
        _connected_address: &str,
        _connected_port: u32,
        _originator_address: &str,
        _originator_port: u32,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        refuse(reply, "forwarded-tcpip");
        Ok(())
    }

    async fn server_channel_open_forwarded_streamlocal(
        &mut self,
        _channel: Channel<Msg>,
        _socket_path: &str,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        refuse(reply, "forwarded-streamlocal");
        Ok(())
    }

    async fn server_channel_open_agent_forward(
        &mut self,
        _channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        refuse(reply, "auth-agent");
        Ok(())
    }

    async fn should_accept_unknown_server_channel(
        &mut self,
        _id: russh::ChannelId,
        channel_type: &str,
    ) -> bool {
        tracing::warn!(
            channel_type,
            "refused a channel the SSH server tried to open"
        );
        false
    }

    async fn server_channel_open_session(
        &mut self,
        _channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        refuse(reply, "session");
        Ok(())
    }

    async fn server_channel_open_direct_tcpip(
        &mut self,
        _channel: Channel<Msg>,
        _host_to_connect: &str,
        _port_to_connect: u32,
        _originator_address: &str,
        _originator_port: u32,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        refuse(reply, "direct-tcpip");
        Ok(())
    }

    async fn server_channel_open_direct_streamlocal(
        &mut self,
        _channel: Channel<Msg>,
        _socket_path: &str,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        refuse(reply, "direct-streamlocal");
        Ok(())
    }

    async fn server_channel_open_x11(
        &mut self,
        _channel: Channel<Msg>,
        _originator_address: &str,
        _originator_port: u32,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        refuse(reply, "x11");
        Ok(())
    }
}

/// Dropping the reply handle rejects the channel open.
fn refuse(reply: ChannelOpenHandle, kind: &str) {
    tracing::warn!(
        channel_type = kind,
        "refused a channel the SSH server tried to open"
    );
    drop(reply);
}

/// One authenticated connection.
pub(crate) struct Connection {
    pub(crate) handle: Handle<Client>,
    /// The credential (name, version) it authenticated with.
    credential: (String, u64),
    /// What the probe found the remote login shell to be.
    pub(crate) shell: LoginShell,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("credential", &self.credential.0)
            .field("closed", &self.handle.is_closed())
            .field("shell", &self.shell)
            .finish_non_exhaustive()
    }
}

/// How the remote login shell parses the command string, as the probe found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LoginShell {
    /// It parses POSIX single quotes as the renderer writes them.
    Posix,
    /// It does not (fish, csh/tcsh, cmd.exe, PowerShell, …): what the probe saw, in a few
    /// words the agent may read.
    Unsupported(String),
}

/// The probe: a command string whose POSIX reading prints [`PROBE_EXPECTED`] and whose reading
/// by any other common shell prints something else or fails. It exercises exactly what the
/// renderer relies on: a backslash, `$` and a newline inside single quotes stay literal, and
/// `'\''` is one quote. It holds no character that cmd.exe or PowerShell act on outside
/// quotes (`&`, `|`, `<`, `>`, `^`, `;`, parentheses) and a single `%`, so whatever the
/// shell, the probe only prints or fails.
const PROBE: &str = "printf '%s.' 'sallyport-probe' 'a\\' 'b'\\''c' '$HOME' '\n'";
/// What a POSIX shell prints for [`PROBE`].
const PROBE_EXPECTED: &str = "sallyport-probe.a\\.b'c.$HOME.\n.";
/// The most probe output read: a start-up file that prints a banner is tolerated before the
/// expected text, but not without bound.
const PROBE_OUTPUT_CAP: usize = 4096;

/// Runs [`PROBE`] once on a fresh connection. `Err` when the probe could not run at all (the
/// connection is then not used).
async fn probe_shell(
    handle: &Handle<Client>,
    probes: &AtomicU64,
) -> Result<LoginShell, ConnectError> {
    let mut channel = handle.channel_open_session().await.map_err(|_| {
        ConnectError::Handshake(
            "the server refused a session channel for the login shell probe".into(),
        )
    })?;
    probes.fetch_add(1, Ordering::Relaxed);
    channel
        .exec(true, PROBE.as_bytes())
        .await
        .map_err(|_| ConnectError::Handshake("the login shell probe could not be sent".into()))?;
    let mut stdout = Vec::new();
    let mut exit = None;
    while let Some(msg) = channel.wait().await {
        match msg {
            russh::ChannelMsg::Data { data } => {
                let room = PROBE_OUTPUT_CAP.saturating_sub(stdout.len());
                stdout.extend_from_slice(&data[..data.len().min(room)]);
            }
            russh::ChannelMsg::ExitStatus { exit_status } => exit = Some(exit_status),
            russh::ChannelMsg::Close => break,
            _ => {}
        }
    }
    Ok(judge_probe(&stdout, exit))
}

/// Whether the probe's output and exit status are a POSIX shell's.
fn judge_probe(stdout: &[u8], exit: Option<u32>) -> LoginShell {
    if exit == Some(0) && stdout.ends_with(PROBE_EXPECTED.as_bytes()) {
        return LoginShell::Posix;
    }
    let seen = match exit {
        Some(0) => "printed something other than a POSIX shell would".to_owned(),
        Some(code) => format!("failed with exit status {code}"),
        None => "ended without an exit status".to_owned(),
    };
    LoginShell::Unsupported(seen)
}

fn client_config(keepalive: Option<Duration>) -> client::Config {
    client::Config {
        // Without it every exec round trip waits on Nagle's algorithm (~40 ms).
        nodelay: true,
        keepalive_interval: keepalive,
        keepalive_max: 3,
        inactivity_timeout: None,
        ..client::Config::default()
    }
}

/// How a connection is opened: the channel's settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectOptions {
    /// Connecting, the handshake, authentication and the shell probe together.
    pub(crate) timeout: Duration,
    pub(crate) keepalive: Option<Duration>,
    /// The clock SSH user certificates are dated by.
    pub(crate) clock: fn() -> SystemTime,
}

/// How a connection authenticates.
enum Auth {
    Key(Box<russh::keys::PrivateKey>),
    Password,
    Certificate(Box<Signed>),
}

/// Connects to `host`, authenticates with `credential` and probes the login shell once
/// ([`LoginShell`], counted in `probes`), all within the options' timeout.
pub(crate) async fn connect(
    host: &HostEntry,
    credential: &Credential,
    options: ConnectOptions,
    probes: &AtomicU64,
) -> Result<Connection, ConnectError> {
    let ConnectOptions {
        timeout, keepalive, ..
    } = options;
    let auth = match &credential.meta().kind {
        CredentialKind::SshKey => {
            let secret = credential.secret();
            // The decode error is not passed on: its text could quote the key material.
            let key = decode_secret_key(secret.expose(), secret.expose_passphrase()).map_err(|_| {
                ConnectError::CredentialUnusable(format!(
                    "credential `{}` does not hold a usable OpenSSH private key (or its passphrase is wrong)",
                    credential.meta().name
                ))
            })?;
            Auth::Key(Box::new(key))
        }
        CredentialKind::SshPassword => Auth::Password,
        // A key pair and a certificate for this connection alone.
        CredentialKind::SshCertificateAuthority(ca) => Auth::Certificate(Box::new(
            certificate::sign_for(credential, ca, host, (options.clock)())?,
        )),
        _ => {
            return Err(ConnectError::CredentialUnusable(format!(
                "credential `{}` is not an SSH key, password or certificate authority",
                credential.meta().name
            )));
        }
    };
    let check = Arc::new(Mutex::new(KeyCheck::default()));
    let handler = Client {
        pins: host.pins.clone().into(),
        check: Arc::clone(&check),
    };
    let attempt = async {
        let stream = tokio::net::TcpStream::connect((host.address.as_str(), host.port))
            .await
            .map_err(|e| ConnectError::Unreachable(e.kind().to_string()))?;
        let _ = stream.set_nodelay(true);
        let config = Arc::new(client_config(keepalive));
        let mut handle = client::connect_stream(config, stream, handler)
            .await
            .map_err(|e| {
                match check
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .mismatch
                    .take()
                {
                    Some(seen) => ConnectError::HostKeyMismatch(seen),
                    None => ConnectError::Handshake(e.to_string()),
                }
            })?;
        let user = host.user.clone();
        let auth = match auth {
            Auth::Key(key) => {
                let hash = handle
                    .best_supported_rsa_hash()
                    .await
                    .ok()
                    .flatten()
                    .flatten();
                handle
                    .authenticate_publickey(user, PrivateKeyWithHashAlg::new(Arc::new(*key), hash))
                    .await
            }
            Auth::Password => {
                handle
                    .authenticate_password(user, credential.secret().expose())
                    .await
            }
            Auth::Certificate(signed) => {
                let Signed { key, certificate } = *signed;
                handle
                    .authenticate_openssh_cert(user, Arc::new(key), certificate)
                    .await
            }
        }
        .map_err(|e| ConnectError::Handshake(e.to_string()))?;
        if !auth.success() {
            return Err(ConnectError::AuthRejected);
        }
        Ok(handle)
    };
    let attempt = async {
        let handle = attempt.await?;
        let shell = probe_shell(&handle, probes).await?;
        Ok::<_, ConnectError>((handle, shell))
    };
    let (handle, shell) = tokio::time::timeout(timeout, attempt)
        .await
        .map_err(|_| ConnectError::Timeout)??;
    if let LoginShell::Unsupported(seen) = &shell {
        tracing::warn!(host = %host.name, user = %host.user, probe = %seen, "the remote login shell does not parse POSIX quoting; commands to this host are refused");
    }
    Ok(Connection {
        handle,
        credential: (credential.meta().name.clone(), credential.meta().version),
        shell,
    })
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

/// Authenticated connections, one per inventory host and user, reused across calls (a new
/// SSH channel per command).
#[derive(Debug, Default)]
pub(crate) struct Pool {
    slots: Mutex<HashMap<(String, String), Slot>>,
    opened: AtomicU64,
    /// Login shell probes sent.
    probes: AtomicU64,
}

impl Pool {
    /// A live connection for `host` authenticated with `credential`, and whether it is new.
    pub(crate) async fn get(
        &self,
        host: &HostEntry,
        credential: &Credential,
        options: ConnectOptions,
    ) -> Result<(Arc<Connection>, bool), ConnectError> {
        let slot = self.slot(host);
        let mut guard = slot.lock().await;
        if let Some(conn) = guard.as_ref() {
            let same_credential = conn.credential.0 == credential.meta().name
                && conn.credential.1 == credential.meta().version;
            if same_credential && !conn.handle.is_closed() {
                return Ok((Arc::clone(conn), false));
            }
        }
        *guard = None;
        let conn = Arc::new(connect(host, credential, options, &self.probes).await?);
        self.opened.fetch_add(1, Ordering::Relaxed);
        *guard = Some(Arc::clone(&conn));
        Ok((conn, true))
    }

    /// Forgets `conn` (broken); the next call connects afresh.
    pub(crate) async fn discard(&self, host: &HostEntry, conn: &Arc<Connection>) {
        let slot = self.slot(host);
        let mut guard = slot.lock().await;
        if guard.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *guard = None;
        }
    }

    /// Connections opened so far.
    pub(crate) fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Login shell probes sent so far.
    pub(crate) fn probes(&self) -> u64 {
        self.probes.load(Ordering::Relaxed)
    }

    /// Drops every pooled connection.
    pub(crate) fn clear(&self) {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    fn slot(&self, host: &HostEntry) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(
            slots
                .entry((host.name.clone(), host.user.clone()))
                .or_default(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_passes_only_on_exactly_the_posix_reading() {
        assert_eq!(PROBE_EXPECTED, "sallyport-probe.a\\.b'c.$HOME.\n.");
        assert_eq!(
            judge_probe(PROBE_EXPECTED.as_bytes(), Some(0)),
            LoginShell::Posix
        );
        // A start-up file's banner before the expected text is tolerated.
        let banner = format!("welcome\n{PROBE_EXPECTED}");
        assert_eq!(judge_probe(banner.as_bytes(), Some(0)), LoginShell::Posix);
        assert_eq!(
            judge_probe(b"", Some(127)),
            LoginShell::Unsupported("failed with exit status 127".into())
        );
        assert_eq!(
            judge_probe(PROBE_EXPECTED.as_bytes(), None),
            LoginShell::Unsupported("ended without an exit status".into())
        );
        // csh keeps the backslash but cannot hold a newline in quotes; fish reads `\'` as a
        // quote: both print something else.
        assert_eq!(
            judge_probe(b"sallyport-probe.a\\.b'c.$HOME.", Some(0)),
            LoginShell::Unsupported("printed something other than a POSIX shell would".into())
        );
    }
}
