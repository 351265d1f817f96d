//! The SSH channel for sallyport: run narrow, typed commands on named hosts without handing
//! the agent a shell or a key.
//!
//! An action declares an argv template (`["systemctl", "restart", "{unit}"]`) and an
//! inventory host by name; the agent supplies only the validated fields. [`SshChannel`] looks
//! the host up in the [`Inventory`] (address, port, user, pinned host keys, the vault
//! credential bound to that host and user), renders the template with every substituted value
//! single-quoted so the remote shell receives it as exactly one literal argument, and runs it
//! over a pooled, authenticated [russh](https://docs.rs/russh) connection.
//!
//! # What the channel guarantees
//!
//! - **Pinned host keys.** Each host pins one or more keys (OpenSSH known_hosts lines, public
//!   key lines or `SHA256:` fingerprints). An unknown or changed key refuses the connection
//!   before authentication with `host_key_mismatch`; there is no trust on first use. Corrupt
//!   pin data refuses the whole [`Inventory`] when it is built.
//! - **One literal argument per value.** Values are checked by the action's schema first
//!   (give them an `enum` or `pattern` where you can), then single-quoted: `;`, `$( )`,
//!   backticks, quotes, globs and newlines never become shell syntax. A value containing NUL
//!   is refused before consent (`invalid_request`): no remote argument can carry it.
//!   Non-UTF-8 cannot occur: arguments arrive as JSON strings.
//! - **A POSIX login shell, checked.** SSH hands the command string to the remote user's
//!   login shell, and the quoting above is POSIX quoting: under fish `\';id;#` runs `id`,
//!   under cmd.exe `a & whoami` runs `whoami`. So each new pooled connection first runs one
//!   harmless probe command whose output tells whether the shell parses POSIX quotes; on a
//!   connection whose shell does not (fish, csh/tcsh, cmd.exe, PowerShell), every call is
//!   refused before anything runs with `remote_shell_unsupported`.
//!   [`SshChannel::shell_probes`] counts the probes (one per connection, not per command);
//!   the finding lasts as long as the pooled connection ([`SshChannel::close_idle`] makes the
//!   next call probe afresh, after an account's shell was changed).
//! - **No value becomes an option by accident.** A value that would begin a remote argument
//!   with `-` (`--checkpoint-action=exec=sh` for `tar`, `-1` for `kill`) is refused before
//!   consent (`invalid_request`), unless the argv template puts a literal `--` before it or
//!   the action allows a leading dash for that field
//!   ([`SshTarget::with_leading_dash_allowed`](sallyport_core::target::SshTarget::with_leading_dash_allowed),
//!   `#[ssh(allow_leading_dash)]` on the field).
//! - **Nothing else is opened.** No PTY, no agent, X11 or port forwarding, no environment
//!   variables; every channel the server tries to open towards the client is refused.
//! - **Bounded output.** stdout and stderr are each capped (64 KiB by default,
//!   [`SshTarget::with_output_cap`](sallyport_core::target::SshTarget::with_output_cap) per
//!   action); beyond the cap the data is read and discarded, so the command is not blocked
//!   and memory stays bounded, and the result says `stdout_truncated: true`.
//! - **Exit mapping.** Exit 0 is `completed`; codes declared with
//!   [`SshTarget::with_exit`](sallyport_core::target::SshTarget::with_exit) map to their
//!   status (`already_in_desired_state`, `rejected`, …); any other code is `rejected` with a
//!   filtered tail of stderr as the reason.
//! - **Honest uncertainty.** A connection lost after the command was sent, a missing exit
//!   status, a kill by signal, a timeout, or a cancelled call after the exec request left are
//!   `unknown` for every action that is not `observe` (for `observe` they are `rejected` and
//!   safe to retry).
//! - **Pooling.** Authenticated connections are kept per host and user and reused (one new
//!   SSH channel per command); a broken connection is noticed and replaced before the command
//!   is sent. Handshake and authentication failures have distinct codes (`connect_failed`,
//!   `connect_timeout`, `handshake_failed`, `host_key_mismatch`, `auth_failed`); `auth_failed`
//!   marks the credential unusable until it is replaced. A connection authenticated with a
//!   user certificate is pooled the same way; the next one signs a new certificate.
//!
//! # Credentials: keys, passwords and user certificates
//!
//! A host's credential is an SSH private key (OpenSSH format, with its passphrase if it has
//! one), a password, or an OpenSSH **certificate authority**
//! ([`SshCertificateAuthority`](sallyport_core::vault::CredentialKind::SshCertificateAuthority)):
//! the vault holds the CA's private key, and for each connection it opens the channel makes a
//! fresh Ed25519 key pair and signs a user certificate for it that
//!
//! - names one principal, the inventory host's user, and is signed for no other;
//! - is valid from a minute before now (a server clock a little behind still accepts it)
//!   until the CA's `validity_secs` after now (5 minutes by default, at most an hour): it only
//!   has to outlive the authentication, the pooled connection outlives it;
//! - carries no critical options and no extensions: no PTY, no agent, X11 or port
//!   forwarding, no `~/.ssh/rc` (the channel uses none of them);
//! - has a random serial and the key id `sallyport <credential> for <user>@<host>`, which
//!   sshd writes to its log.
//!
//! The server trusts the CA (`TrustedUserCAKeys /etc/ssh/sallyport_user_ca.pub`, and
//! optionally `AuthorizedPrincipalsFile` to map principals to users). A certificate the server
//! refuses — a CA it does not trust, a principal it does not allow for the user, an expired
//! certificate — is `rejected`/`auth_failed` with nothing run, and marks the credential
//! unusable until it is replaced, as a refused key does. A CA key that does not decode (or a
//! wrong passphrase) is `rejected`/`credential_unusable` before connecting. The CA key is a
//! vault secret like any other; the ephemeral private key is zeroized when dropped.
//! [`SshChannelBuilder::certificate_clock`] sets the clock certificates are dated by.
//!
//! ```no_run
//! use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, FileVault, Secret, SshCertificateAuthority, VaultAdmin};
//! # fn demo(vault: &FileVault) -> Result<(), Box<dyn std::error::Error>> {
//! vault.add(
//!     CredentialMeta::new(
//!         "web-user-ca",
//!         CredentialKind::SshCertificateAuthority(
//!             SshCertificateAuthority::new().with_validity_secs(120),
//!         ),
//!         Binding::ssh("web1", "deploy"),
//!     ),
//!     Secret::new(std::fs::read_to_string("/etc/sallyport/user_ca")?)
//!         .with_passphrase("the CA key's passphrase"),
//! )?;
//! # Ok(()) }
//! ```
//!
//! # A remote command cannot be reliably cancelled
//!
//! SSH has no dependable way to stop a command once the exec request has left: OpenSSH
//! ignores most signal requests, and closing the channel or the connection only takes away
//! the command's terminal-less stdin and stdout — a command that does not write keeps running.
//! So a timeout, a dropped call future or a lost connection after the exec request is reported
//! as `unknown` (the executor records `cancelled_after_send`), never as "stopped". Give
//! state-changing actions a read-only `reconcile` action, and make their commands idempotent
//! where you can (`systemctl restart` is; "append a line" is not).
//!
//! # Example
//!
//! ```no_run
//! use sallyport_core::journal::SqliteJournal;
//! use sallyport_core::target::{SshTarget, Target};
//! use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
//! use sallyport_core::{Action, ActionSpec, Catalog, EffectClass, Executor, Session, Status};
//! use sallyport_ssh::{Host, Inventory, SshChannel};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! /// Restart one systemd unit on web1.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct RestartUnit {
//!     #[schemars(regex(pattern = r"^(nginx|php-fpm)\.service$"))]
//!     unit: String,
//! }
//!
//! // `#[derive(Action)]` with `#[ssh(host = "web1", argv = ["systemctl", "restart", "{unit}"],
//! // exit(3) = already_in_desired_state)]` writes this impl.
//! impl Action for RestartUnit {
//!     const NAME: &'static str = "restart_unit";
//!     type Output = sallyport_core::target::CommandOutput;
//!
//!     fn spec() -> ActionSpec {
//!         ActionSpec::new("restart_unit", EffectClass::ReversibleChange)
//!             .with_description("Restart one systemd unit on web1.")
//!             .with_credential("web1-deploy")
//!             .with_target(Target::Ssh(
//!                 SshTarget::new("web1", ["systemctl", "restart", "{unit}"])
//!                     .with_exit(3, Status::AlreadyInDesiredState),
//!             ))
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let inventory = Inventory::builder()
//!     .host(
//!         Host::new("web1", "10.0.0.5", "deploy", "web1-deploy")
//!             .with_host_key("10.0.0.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"),
//!     )
//!     .build()?;
//! let vault = MemoryVault::new();
//! vault.set(
//!     CredentialMeta {
//!         name: "web1-deploy".into(),
//!         kind: CredentialKind::SshKey,
//!         binding: Binding::ssh("web1", "deploy"),
//!         version: 1,
//!     },
//!     Secret::new(std::fs::read_to_string("/etc/sallyport/web1-deploy.key")?),
//! );
//! let executor = Executor::builder(Catalog::builder().action::<RestartUnit>().build()?)
//!     .journal(SqliteJournal::open("journal.db")?)
//!     .vault(vault)
//!     .channel(SshChannel::new(inventory))
//!     .build()?;
//! let result = executor
//!     .call("restart_unit", serde_json::json!({"unit": "nginx.service"}), &Session::new("ops-1"))
//!     .await;
//! println!("{}", result.to_json());
//! # Ok(()) }
//! ```

mod certificate;
mod channel;
mod client;
mod command;
mod inventory;
mod output;

pub use crate::channel::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_OUTPUT_CAP, DEFAULT_TIMEOUT, SshChannel, SshChannelBuilder,
};
pub use crate::inventory::{Host, HostKeyPin, Inventory, InventoryBuilder, InventoryError};
