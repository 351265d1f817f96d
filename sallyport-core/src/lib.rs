//! sallyport-core: typed, narrow agent actions executed through one fixed safety pipeline.
//!
//! An OpenAPI operation is not an agent action. An action is smaller: a bounded goal, inputs
//! the agent can justify, a result it can act on, consent sized to its consequences and a plan
//! for failure. You write each action once, as a Rust struct with `#[derive(Action)]`; the
//! card, the JSON Schema, the tool exports and the definition hash all come from it.
//!
//! Every call then goes through the same [`Executor`] pipeline: payload drift check → scope →
//! definition drift → vault → preconditions → consent → durable intent with an executor-made
//! idempotency key → dispatch → normalization to one of five [`Status`]es → secret scrubbing
//! → a hash-chained audit record. A refusal at any stage before dispatch sends nothing.
//!
//! # Features
//!
//! This is the crate to name. It re-exports [`sallyport-kernel`](sallyport_kernel) (the traits,
//! the executor, the scrubber and the audit chain, with no storage backend) and, through its
//! default features, the embedded backends:
//!
//! | feature | default | adds |
//! |---|---|---|
//! | `sqlite` | yes | [`journal::SqliteJournal`], the embedded journal (`sallyport-sqlite`, bundled SQLite) |
//! | `file-vault` | yes | [`vault::FileVault`], the encrypted file vault (`sallyport-vault`, Argon2id + XChaCha20-Poly1305) |
//! | `secret-rules` | yes | credential-shaped values the vault does not know are found in every answer with Gitleaks' maintained rules (`sallyport-secrets`; see [`inspect`]); the whole answer guard costs 2.7–2.9 µs per KiB on an idle host (more on a loaded one; `BENCHMARKS.md`), and the rules compile once per process, about a tenth of a second, when the first executor builder is made |
//! | `keychain` | no | `vault::KeychainVault`, the OS keychains (`sallyport-vault`) |
//! | `otel` | no | OpenTelemetry-style spans per call ([`telemetry`]) |
//!
//! A program with a journal and a vault of its own (`sallyport-postgres`, a keychain) turns
//! the defaults off and compiles none of SQLite or the file vault's cryptography:
//!
//! ```toml
//! sallyport-core = { version = "0.1", default-features = false }
//! sallyport-postgres = "0.1"
//! ```
//!
//! # Example
//!
//! ```
//! use sallyport_core::channel::{
//!     CallView, Channel, ChannelOutcome, DescribedRequest, Dispatch, PreparedRequest,
//! };
//! use sallyport_core::consent::{ConsentDecision, FnConsent};
//! use sallyport_core::journal::SqliteJournal;
//! use sallyport_core::outcome::{Refusal, Status};
//! use sallyport_core::{Action, Catalog, Executor, RefusalCode, Session};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::json;
//!
//! /// Restart one worker of a project.
//! #[derive(Action, Deserialize, JsonSchema)]
//! #[action(name = "restart_worker", effect = reversible_change)]
//! #[channel(name = "workers")]
//! #[serde(deny_unknown_fields)]
//! struct RestartWorker {
//!     #[scope(project)]
//!     project_id: String,
//!     #[schemars(regex(pattern = r"^w[0-9]+$"))]
//!     worker: String,
//!     /// Why the agent wants this; stored and shown to the human, never parsed.
//!     #[audit_note]
//!     reason: String,
//! }
//!
//! /// A channel of the application's own (sallyport-http and sallyport-ssh provide real ones).
//! struct Workers;
//!
//! #[async_trait::async_trait]
//! impl Channel for Workers {
//!     fn name(&self) -> &str {
//!         "workers"
//!     }
//!     fn prepare(&self, call: &CallView<'_>) -> Result<Box<dyn PreparedRequest>, Refusal> {
//!         // Built once; the human approves it, the dispatch below sends exactly it.
//!         let worker = call.arguments["worker"].clone();
//!         Ok(Box::new(DescribedRequest::new(format!("restart {worker}"), worker)))
//!     }
//!     async fn dispatch(&self, call: Dispatch<'_>) -> ChannelOutcome {
//!         // Granted only while the vault is unlocked and the credential unchanged.
//!         let permit = match call.context.permit().await {
//!             Ok(permit) => permit,
//!             Err(refused) => return refused, // nothing is sent
//!         };
//!         let Some(request) = call.prepared::<DescribedRequest>() else {
//!             return ChannelOutcome::new(Status::Rejected); // not ours: never sent
//!         };
//!         permit.sending(); // right before the request leaves
//!         ChannelOutcome::completed(json!({"worker": request.arguments(), "state": "running"}))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let catalog = Catalog::builder().action::<RestartWorker>().build()?;
//! let executor = Executor::builder(catalog)
//!     .journal(SqliteJournal::open(dir.path().join("journal.db"))?)
//!     .channel(Workers)
//!     .consent(FnConsent::new(|request| async move {
//!         println!("{}", request.render()); // what the human sees
//!         ConsentDecision::Approve
//!     }))
//!     .build()?;
//!
//! let session = Session::new("chat-7").allow("project", ["proj_1"]);
//! let ok = executor
//!     .call("restart_worker", json!({"project_id": "proj_1", "worker": "w3", "reason": "stuck queue"}), &session)
//!     .await;
//! assert_eq!(ok.status, Status::Completed);
//!
//! // Another project: refused before anyone is asked, nothing sent, audited.
//! let refused = executor
//!     .call("restart_worker", json!({"project_id": "proj_9", "worker": "w3", "reason": "stuck queue"}), &session)
//!     .await;
//! assert_eq!(refused.code, Some(RefusalCode::OutOfScope.into()));
//! assert!(executor.journal().verify().await?.is_intact());
//! # Ok(()) }
//! ```
//!
//! # The vault: unlocked by the process that calls
//!
//! A [`vault::FileVault`] is locked when opened, and every call that needs a credential is
//! refused with `vault_locked` until the process running the executor unlocks it:
//! `sallyport vault unlock` in a shell unlocks nothing in another process (it only removes the
//! lock marker `sallyport vault lock` leaves). A service has no person at a terminal; give it
//! the passphrase in a file only its user can read (mode 0600, e.g. systemd's
//! `LoadCredential=`), in an environment variable, or keep the credentials in the OS keychain
//! instead (`vault::KeychainVault`, feature `keychain`, whose `unlock` takes no passphrase):
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use sallyport_core::vault::{
//!     Binding, CredentialKind, CredentialMeta, FileVault, KdfParams, Secret, VaultAdmin,
//! };
//!
//! // Once, to set up: a new vault with the API's token in it. The agent never sees it, and
//! // the base URL it is bound to is where the HTTP channel sends the action's requests.
//! let passphrase = std::fs::read_to_string("/etc/myapp/vault.passphrase")?;
//! let vault = FileVault::create("/var/lib/myapp/vault.sallyport", passphrase.trim_end(), KdfParams::default())?;
//! let token = std::env::var("DEPLOY_API_TOKEN")?;
//! vault.add(
//!     CredentialMeta::new("deploy-api", CredentialKind::Bearer, Binding::url("https://deploy.example.com")),
//!     Secret::new(token),
//! )?;
//!
//! // Every time the service starts: unlock, then hand the vault to the executor.
//! let vault = FileVault::open("/var/lib/myapp/vault.sallyport");
//! vault.unlock_with_passphrase_file("/etc/myapp/vault.passphrase")?; // refused unless 0600
//! // or: vault.unlock_from_env("MYAPP_VAULT_PASSPHRASE")?;
//! // or: vault.unlock(&passphrase_you_read_elsewhere)?;
//! # Ok(()) }
//! ```
//!
//! The vault derives its key with Argon2id (64 MiB, 3 passes by default). A debug build
//! compiles it unoptimized, and then each `create` and `unlock` took 4.8 s instead of 0.27 s
//! (measured in issue 41). sallyport does not weaken the derivation in debug builds (a vault
//! made by one build is opened by the other); optimize those two crates in your own
//! `Cargo.toml`, since a dependency's profile settings never reach your build:
//!
//! ```toml
//! [profile.dev.package.argon2]
//! opt-level = 3
//! [profile.dev.package.blake2]
//! opt-level = 3
//! ```
//!
//! # Modules
//!
//! - [`action`]: the [`Action`] trait and its card, [`ActionSpec`].
//! - [`catalog`]: registering actions; MCP, OpenAI, Anthropic and JSON Schema exports.
//! - [`executor`]: the pipeline and its builder.
//! - [`drift`]: the payload drift guard and canonical JSON.
//! - [`consent`]: consent requests, providers and session grants; [`danger`] for auto-approve.
//! - [`approval`]: deferred consent — calls parked for a human who answers later, decided
//!   from any front end through one compare-and-set, carried out exactly once.
//! - [`journal`]: durable intents and the hash-chained audit log; [`journal::SqliteJournal`]
//!   keeps them in one SQLite file (feature `sqlite`).
//! - [`vault`]: credentials ([`vault::FileVault`] with feature `file-vault`); [`scrub`]:
//!   removing secret values from everything outgoing; [`inspect`]: the answer guards
//!   (credential-shaped values the vault does not know, text that tries to steer the model);
//!   [`sensitive`]: personal data by declaration (`#[derive(Sensitive)]` on a result type).
//! - [`hooks`]: the host's own checks, before a call is sent and on every answer.
//! - [`code`]: result, audit and consent codes as types; [`after_send`]: the failure rules
//!   every channel shares.
//! - [`channel`]: the transport trait; [`target`]: the HTTP and SSH templates actions carry.
//! - [`telemetry`]: OpenTelemetry spans per call (feature `otel`), with their attribute names.
//! - [`clock`]: the one clock every time sallyport writes or compares is read from.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(inline)]
pub use sallyport_kernel::*;

pub mod journal {
    //! Durable attempt records and the hash-chained audit log: the kernel's
    //! [`journal`](sallyport_kernel::journal) module, plus the embedded SQLite journal with the
    //! `sqlite` feature.
    #[doc(inline)]
    pub use sallyport_kernel::journal::*;
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub use sallyport_sqlite::{MAX_BATCH, SqliteJournal, SqliteJournalBuilder};
}

pub mod vault {
    //! Credentials: the kernel's [`vault`](sallyport_kernel::vault) module, plus the encrypted
    //! file vault (feature `file-vault`) and the OS keychain vault (feature `keychain`).
    #[doc(inline)]
    pub use sallyport_kernel::vault::*;
    #[cfg(feature = "file-vault")]
    #[cfg_attr(docsrs, doc(cfg(feature = "file-vault")))]
    pub use sallyport_vault::{FORMAT_VERSION, FileVault, FileVaultStatus, KdfParams};
    #[cfg(feature = "keychain")]
    #[cfg_attr(docsrs, doc(cfg(feature = "keychain")))]
    pub use sallyport_vault::{KeychainBackend, KeychainVault};
}
