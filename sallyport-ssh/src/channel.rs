//! [`SshChannel`]: the [`Channel`] that runs an action's argv template on an inventory host.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use russh::ChannelMsg;
use sallyport_core::EffectClass;
use sallyport_core::after_send::{AfterSend, Failure, first_not_sent};
use sallyport_core::channel::{
    CallView, Channel, ChannelOutcome, Dispatch, PreparedRequest, RequestSummary, fingerprint,
};
use sallyport_core::code::{Code, RefusalCode, UpstreamCode};
use sallyport_core::outcome::{Origin, Refusal, Status};
use sallyport_core::target::{SshTarget, Target};
use sallyport_core::vault::{Credential, CredentialMeta};
use serde_json::{Value, json};

use crate::client::{ConnectError, ConnectOptions, Connection, LoginShell, Pool};
use crate::command::{self, Rendered};
use crate::inventory::{HostEntry, Inventory};
use crate::output::Capture;

/// Default per-stream output cap: 64 KiB.
pub const DEFAULT_OUTPUT_CAP: usize = 64 * 1024;
/// Default command timeout: 30 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default connect timeout (TCP, handshake and authentication): 10 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest stderr tail shown in a rejection's reason, in characters.
const STDERR_TAIL: usize = 300;

/// The SSH channel. Cheap to clone (clones share the connection pool).
///
/// See the [crate documentation](crate) for the whole picture.
#[derive(Clone, Debug)]
pub struct SshChannel {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    inventory: Inventory,
    pool: Pool,
    connect_timeout: Duration,
    default_timeout: Duration,
    default_output_cap: usize,
    keepalive: Option<Duration>,
    certificate_clock: fn() -> SystemTime,
}

/// Builds an [`SshChannel`]. Setters never fail.
#[derive(Debug)]
#[must_use]
pub struct SshChannelBuilder {
    inventory: Inventory,
    connect_timeout: Duration,
    default_timeout: Duration,
    default_output_cap: usize,
    keepalive: Option<Duration>,
    certificate_clock: fn() -> SystemTime,
}

impl SshChannelBuilder {
    /// How long connecting, the handshake and authentication may take together (default
    /// 10 s). A failure here is before anything was sent.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The command timeout for actions that do not declare one (default 30 s).
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// The per-stream output cap for actions that do not declare one (default 64 KiB).
    pub fn default_output_cap(mut self, bytes: usize) -> Self {
        self.default_output_cap = bytes;
        self
    }

    /// Sends an SSH keepalive on idle pooled connections this often (default 15 s; `None`
    /// disables it), so a dead connection is noticed and replaced before the next call.
    pub fn keepalive(mut self, interval: Option<Duration>) -> Self {
        self.keepalive = interval;
        self
    }

    /// The clock that dates the SSH user certificates the channel signs for credentials of
    /// kind `ssh_certificate_authority` (default: the system clock). A certificate is valid
    /// from a minute before this clock's now until the CA's `validity_secs` after it; a
    /// clock set back further than that makes certificates the server refuses as expired
    /// (how the tests check that an expired certificate is refused).
    pub fn certificate_clock(mut self, clock: fn() -> SystemTime) -> Self {
        self.certificate_clock = clock;
        self
    }

    /// Builds the channel.
    pub fn build(self) -> SshChannel {
        SshChannel {
            inner: Arc::new(Inner {
                inventory: self.inventory,
                pool: Pool::default(),
                connect_timeout: self.connect_timeout,
                default_timeout: self.default_timeout,
                default_output_cap: self.default_output_cap,
                keepalive: self.keepalive,
                certificate_clock: self.certificate_clock,
            }),
        }
    }
}

impl Inner {
    fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            timeout: self.connect_timeout,
            keepalive: self.keepalive,
            clock: self.certificate_clock,
        }
    }
}

/// The command of one call, built once at stage 4 and bound to the credential at stage 6:
/// consent shows it, the intent fingerprints it, dispatch runs exactly it.
#[derive(Clone, Debug)]
struct SshPrepared {
    host: HostEntry,
    command: Rendered,
}

impl PreparedRequest for SshPrepared {
    fn bind(&mut self, credential: &Credential) -> Result<(), Refusal> {
        check_binding(&self.host, credential.meta())
            .map_err(|reason| Refusal::new(RefusalCode::CredentialUnavailable, reason))
    }

    fn summary(&self) -> RequestSummary {
        let host = &self.host;
        RequestSummary(format!(
            "{} ({}@{}:{}): {}",
            host.name, host.user, host.address, host.port, self.command.display
        ))
    }

    fn fingerprint(&self) -> [u8; 32] {
        let host = &self.host;
        let port = host.port.to_string();
        fingerprint([
            host.name.as_bytes(),
            host.user.as_bytes(),
            host.address.as_bytes(),
            port.as_bytes(),
            self.command.wire.as_bytes(),
        ])
    }
}

/// What `dispatch` works from: the action's template and the prepared command.
struct Plan<'a> {
    target: &'a SshTarget,
    host: &'a HostEntry,
    command: &'a Rendered,
}

/// How the remote command ended.
enum Ending {
    Exit(u32),
    Signal(String),
    Refused,
    /// The session ended before the exec request could be handed to it: nothing left.
    NotSent,
    Lost,
    TimedOut,
}

impl SshChannel {
    /// A channel over `inventory` with default settings.
    pub fn new(inventory: Inventory) -> Self {
        Self::builder(inventory).build()
    }

    /// A builder over `inventory`.
    pub fn builder(inventory: Inventory) -> SshChannelBuilder {
        SshChannelBuilder {
            inventory,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            default_timeout: DEFAULT_TIMEOUT,
            default_output_cap: DEFAULT_OUTPUT_CAP,
            keepalive: Some(Duration::from_secs(15)),
            certificate_clock: SystemTime::now,
        }
    }

    /// The inventory.
    pub fn inventory(&self) -> &Inventory {
        &self.inner.inventory
    }

    /// How many SSH connections (handshake + authentication) this channel has opened.
    pub fn connections_opened(&self) -> u64 {
        self.inner.pool.opened()
    }

    /// How many times this channel has probed a remote login shell: once per connection it
    /// opened, never per command.
    pub fn shell_probes(&self) -> u64 {
        self.inner.pool.probes()
    }

    /// Drops every pooled connection; the next call to each host connects afresh.
    pub fn close_idle(&self) {
        self.inner.pool.clear();
    }

    /// Opens (or reuses) the pooled connection to `host` with `credential` ahead of the first
    /// call, so that call does not pay for the handshake. Runs no command.
    ///
    /// # Errors
    ///
    /// A short, secret-free reason when the host is unknown, the credential is not bound to
    /// it, or the connection fails.
    pub async fn warm_up(&self, host: &str, credential: &Credential) -> Result<(), String> {
        let entry = self
            .inner
            .inventory
            .get(host)
            .ok_or_else(|| format!("host `{host}` is not in the SSH inventory"))?;
        check_binding(entry, credential.meta())?;
        self.inner
            .pool
            .get(entry, credential, self.inner.connect_options())
            .await
            .map_err(|e| connect_outcome(e, entry).reason.unwrap_or_default())
            .and_then(|(conn, _)| match &conn.shell {
                LoginShell::Posix => Ok(()),
                LoginShell::Unsupported(seen) => {
                    Err(unsupported_shell(entry, seen).reason.unwrap_or_default())
                }
            })
    }

    fn prepare_command(
        &self,
        spec: &sallyport_core::ActionSpec,
        arguments: &Value,
    ) -> Result<SshPrepared, Refusal> {
        let Target::Ssh(target) = &spec.target else {
            return Err(invalid("the action does not target the ssh channel"));
        };
        let name = command::render_host(&target.host, arguments).map_err(|e| invalid(e.0))?;
        let host = self
            .inner
            .inventory
            .get(&name)
            .ok_or_else(|| invalid(format!("host `{name}` is not in the SSH inventory")))?;
        match spec.credential.as_deref() {
            None => {
                return Err(Refusal::new(
                    RefusalCode::CredentialUnavailable,
                    format!(
                        "the action binds no credential; host `{name}` needs credential `{}`",
                        host.credential
                    ),
                ));
            }
            Some(bound) if bound != host.credential => {
                return Err(Refusal::new(
                    RefusalCode::CredentialUnavailable,
                    format!(
                        "the action binds credential `{bound}`, but host `{name}` uses `{}`",
                        host.credential
                    ),
                ));
            }
            Some(_) => {}
        }
        let command = command::render(&target.argv, arguments, &target.allow_leading_dash)
            .map_err(|e| invalid(e.0))?;
        Ok(SshPrepared {
            host: host.clone(),
            command,
        })
    }

    /// A live channel on a pooled connection; a pooled connection that turns out broken is
    /// replaced once (nothing was sent on it yet).
    async fn open(
        &self,
        host: &HostEntry,
        credential: &Credential,
    ) -> Result<(Arc<Connection>, russh::Channel<russh::client::Msg>), ChannelOutcome> {
        let inner = &self.inner;
        loop {
            let (conn, fresh) = inner
                .pool
                .get(host, credential, inner.connect_options())
                .await
                .map_err(|e| connect_outcome(e, host))?;
            if let LoginShell::Unsupported(seen) = &conn.shell {
                return Err(unsupported_shell(host, seen));
            }
            let opened =
                tokio::time::timeout(inner.connect_timeout, conn.handle.channel_open_session())
                    .await;
            match opened {
                Ok(Ok(channel)) => return Ok((conn, channel)),
                _ if !fresh => {
                    tracing::debug!(host = %host.name, "pooled SSH connection is broken; reconnecting");
                    inner.pool.discard(host, &conn).await;
                }
                Ok(Err(_)) => {
                    inner.pool.discard(host, &conn).await;
                    return Err(before_send(
                        UpstreamCode::ChannelOpenFailed,
                        format!(
                            "host `{}` refused to open a session channel; nothing was run",
                            host.name
                        ),
                    ));
                }
                Err(_) => {
                    inner.pool.discard(host, &conn).await;
                    return Err(first_not_sent(
                        Failure::ConnectTimedOut,
                        &format!(
                            "host `{}` did not open a session channel in time",
                            host.name
                        ),
                    ));
                }
            }
        }
    }
}

#[async_trait]
impl Channel for SshChannel {
    fn name(&self) -> &str {
        "ssh"
    }

    fn prepare(&self, call: &CallView<'_>) -> Result<Box<dyn PreparedRequest>, Refusal> {
        Ok(Box::new(self.prepare_command(call.spec, call.arguments)?))
    }

    async fn dispatch(&self, call: Dispatch<'_>) -> ChannelOutcome {
        let (Some(prepared), Target::Ssh(target)) =
            (call.prepared::<SshPrepared>(), &call.spec.target)
        else {
            return before_send(
                RefusalCode::ChannelUnavailable,
                "the command was not prepared by the SSH channel; nothing was run".to_owned(),
            );
        };
        let plan = Plan {
            target,
            host: &prepared.host,
            command: &prepared.command,
        };
        let Some(credential) = call.credential else {
            return before_send(
                RefusalCode::CredentialUnavailable,
                "no credential was resolved for this call".to_owned(),
            );
        };
        // The vault must still be unlocked and the credential unchanged since the call
        // resolved it: before the credential is used to authenticate, and again (below)
        // right before the command is sent.
        if let Err(refused) = call.context.permit().await {
            return refused;
        }
        let (conn, mut channel) = match self.open(plan.host, credential).await {
            Ok(open) => open,
            Err(outcome) => return outcome,
        };
        let timeout = plan.target.timeout.unwrap_or(self.inner.default_timeout);
        let cap = plan
            .target
            .output_cap
            .unwrap_or(self.inner.default_output_cap);
        let mut stdout = Capture::new(cap, false, call.context.scrubber());
        let mut stderr = Capture::new(cap, true, call.context.scrubber());
        let permit = match call.context.permit().await {
            Ok(permit) => permit,
            Err(refused) => return refused,
        };
        permit.sending();
        let started = tokio::time::Instant::now();
        let ending = if channel
            .exec(true, plan.command.wire.as_bytes())
            .await
            .is_err()
        {
            Ending::NotSent
        } else {
            match tokio::time::timeout(timeout, drain(&mut channel, &mut stdout, &mut stderr)).await
            {
                Ok(ending) => ending,
                Err(_) => Ending::TimedOut,
            }
        };
        tracing::debug!(host = %plan.host.name, elapsed_ms = started.elapsed().as_millis() as u64, "ssh command ended");
        match ending {
            Ending::Lost | Ending::NotSent => self.inner.pool.discard(plan.host, &conn).await,
            // Best effort: the server may let the command run on (it cannot be reliably
            // cancelled); closing the channel at least stops its output.
            Ending::TimedOut => {
                let _ = tokio::time::timeout(Duration::from_millis(200), channel.close()).await;
            }
            _ => {}
        }
        outcome(&call, &plan, ending, &stdout, &stderr, timeout)
    }
}

/// Reads the channel to its end, keeping at most the cap of each stream.
async fn drain(
    channel: &mut russh::Channel<russh::client::Msg>,
    stdout: &mut Capture<'_>,
    stderr: &mut Capture<'_>,
) -> Ending {
    let mut exit = None;
    let mut accepted = false;
    while let Some(msg) = channel.wait().await {
        match msg {
            ChannelMsg::Data { data } => stdout.push(&data),
            ChannelMsg::ExtendedData { data, ext: 1 } => stderr.push(&data),
            ChannelMsg::ExitStatus { exit_status } => exit = Some(Ending::Exit(exit_status)),
            ChannelMsg::ExitSignal { signal_name, .. } => {
                exit = Some(Ending::Signal(format!("{signal_name:?}")));
            }
            ChannelMsg::Success => accepted = true,
            ChannelMsg::Failure if !accepted && exit.is_none() => return Ending::Refused,
            ChannelMsg::Close => break,
            _ => {}
        }
    }
    exit.unwrap_or(Ending::Lost)
}

fn outcome(
    call: &Dispatch<'_>,
    plan: &Plan<'_>,
    ending: Ending,
    stdout: &Capture,
    stderr: &Capture,
    timeout: Duration,
) -> ChannelOutcome {
    let observe = call.spec.effect == EffectClass::Observe;
    let program = plan
        .target
        .argv
        .first()
        .map_or_else(String::new, |p| p.to_string());
    let mut data = json!({
        "stdout": stdout.text(),
        "stderr": stderr.text(),
        "stdout_bytes": stdout.total(),
        "stderr_bytes": stderr.total(),
        "stdout_truncated": stdout.truncated(),
        "stderr_truncated": stderr.truncated(),
    });
    let rules = AfterSend::new(call.spec);
    match ending {
        Ending::Exit(code) => {
            data["exit_status"] = json!(code);
            let status = plan.target.exit_status(code).unwrap_or(if code == 0 {
                Status::Completed
            } else {
                Status::Rejected
            });
            let mut out = ChannelOutcome::new(status)
                .with_data(data)
                .with_upstream_status(i64::from(code));
            if status == Status::Rejected {
                let tail = stderr.tail_line(STDERR_TAIL);
                let code_name = if plan.target.exit_status(code).is_some() {
                    UpstreamCode::CommandRejected
                } else {
                    UpstreamCode::CommandFailed
                };
                out = out.with_code(code_name).with_reason(if tail.is_empty() {
                    format!("`{program}` exited with status {code}")
                } else {
                    format!("`{program}` exited with status {code}: {tail}")
                });
            }
            out
        }
        Ending::Signal(signal) => {
            data["signal"] = json!(signal);
            let what = format!("`{program}` was killed by signal {signal}");
            if observe {
                rules.uncertain(UpstreamCode::KilledBySignal, &what)
            } else {
                rules.uncertain(UpstreamCode::KilledBySignal, &format!("{what} part-way"))
            }
            .with_data(data)
        }
        Ending::Refused => ChannelOutcome::new(Status::Rejected)
            .with_code(UpstreamCode::ExecRefused)
            .with_reason(format!(
                "host `{}` refused to run the command; nothing was run",
                plan.host.name
            )),
        // One command per call: no earlier request of this call was sent.
        Ending::NotSent => rules.failed(
            Failure::ConnectFailed,
            false,
            &format!(
                "the connection to `{}` closed before the command could be sent",
                plan.host.name
            ),
        ),
        Ending::Lost => rules.failed(
            Failure::ConnectionLost,
            false,
            &format!(
                "the connection to `{}` was lost after `{program}` was sent and before it reported an exit status",
                plan.host.name
            ),
        ),
        Ending::TimedOut => rules.failed(
            Failure::TimedOut,
            false,
            &format!(
                "`{program}` did not finish within {} ms{}",
                timeout.as_millis(),
                if observe {
                    ""
                } else {
                    " and may still be running (a remote command cannot be reliably cancelled)"
                }
            ),
        ),
    }
}

/// The credential must be an SSH key, password or certificate authority bound to this host
/// and user.
fn check_binding(host: &HostEntry, meta: &CredentialMeta) -> Result<(), String> {
    if !meta.kind.is_ssh() {
        return Err(format!(
            "credential `{}` is not an SSH key, password or certificate authority",
            meta.name
        ));
    }
    let bound = meta
        .binding
        .ssh
        .iter()
        .any(|b| b.host == host.name && b.user == host.user);
    if bound {
        Ok(())
    } else {
        Err(format!(
            "credential `{}` is not bound to {}@{}; the channel will not attach it there",
            meta.name, host.user, host.name
        ))
    }
}

fn connect_outcome(error: ConnectError, host: &HostEntry) -> ChannelOutcome {
    let name = &host.name;
    match error {
        // One command per call, sent only after the connection is up: nothing of this call
        // was sent before.
        ConnectError::Unreachable(kind) => first_not_sent(
            Failure::ConnectFailed,
            &format!("could not reach host `{name}` ({kind})"),
        ),
        ConnectError::Timeout => first_not_sent(
            Failure::ConnectTimedOut,
            &format!("host `{name}` did not complete the SSH handshake and authentication in time"),
        ),
        ConnectError::HostKeyMismatch(seen) => before_send(
            UpstreamCode::HostKeyMismatch,
            format!(
                "host `{name}` presented host key {seen}, which is not pinned in the inventory; the connection was refused before authentication"
            ),
        ),
        ConnectError::Handshake(detail) => upstream_before_send(
            UpstreamCode::HandshakeFailed,
            format!("the SSH handshake with host `{name}` failed ({detail}); nothing was run"),
        ),
        ConnectError::AuthRejected => upstream_before_send(
            UpstreamCode::AuthFailed,
            format!(
                "host `{name}` rejected the credential for user `{}`; a human must replace it",
                host.user
            ),
        )
        .with_credential_rejected(),
        ConnectError::CredentialUnusable(reason) => {
            before_send(UpstreamCode::CredentialUnusable, reason)
        }
    }
}

/// The probe found a login shell that does not parse POSIX quoting: no command is sent on
/// this connection, since a quoted value could become shell syntax there.
fn unsupported_shell(host: &HostEntry, seen: &str) -> ChannelOutcome {
    before_send(
        UpstreamCode::RemoteShellUnsupported,
        format!(
            "the login shell of {}@{} does not parse POSIX quoting (its probe {seen}); a quoted \
             argument could run as shell syntax there (fish, csh, cmd.exe and PowerShell quote \
             differently), so nothing was run; a human must give that account a POSIX login \
             shell (sh, bash, dash, ksh, zsh)",
            host.user, host.name
        ),
    )
}

/// A rejection before anything was sent, decided on this side.
fn before_send(code: impl Into<Code>, reason: String) -> ChannelOutcome {
    ChannelOutcome::new(Status::Rejected)
        .with_origin(Origin::Executor)
        .with_code(code)
        .with_reason(reason)
}

/// A rejection before anything was sent, decided by the server (or the network to it).
fn upstream_before_send(code: impl Into<Code>, reason: String) -> ChannelOutcome {
    before_send(code, reason).with_origin(Origin::Upstream)
}

fn invalid(reason: impl Into<String>) -> Refusal {
    Refusal::new(RefusalCode::InvalidRequest, reason)
}
