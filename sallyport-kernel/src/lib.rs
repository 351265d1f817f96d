//! sallyport-kernel: the lean core of sallyport, with no storage backend.
//!
//! **Most programs name [`sallyport-core`](https://docs.rs/sallyport-core) instead**: it
//! re-exports everything here and adds the embedded SQLite journal and the encrypted file
//! vault through default features. This crate is what backends and channels depend on —
//! `sallyport-sqlite`, `sallyport-vault`, `sallyport-postgres`, `sallyport-http`,
//! `sallyport-ssh` — so that a program pays only for the backends it uses.
//!
//! It holds the contract and the pipeline: the [`Action`] trait and its card, the
//! [`Catalog`], the [`Executor`] and its stages, the traits a backend implements
//! ([`Journal`](journal::Journal), [`Vault`](vault::Vault), [`Channel`],
//! [`ConsentProvider`](consent::ConsentProvider), [`policy::Policy`],
//! [`drift::DefinitionGuard`]), the [`scrub`]ber, the payload guard, the audit chain's hashing
//! and signing ([`journal::chain`], [`journal::signing`]), and an in-memory vault
//! ([`vault::MemoryVault`]).
//!
//! Every call goes through the same [`Executor`] pipeline: payload drift check → scope →
//! definition drift → vault → preconditions → consent → durable intent with an executor-made
//! idempotency key → dispatch → normalization to one of five [`Status`]es → secret scrubbing
//! → a hash-chained audit record. A refusal at any stage before dispatch sends nothing.
//!
//! The examples in these docs are written as a program writes them, against `sallyport-core`.
//!
//! The vocabulary every stage speaks — ids, codes, statuses, phases, results, the approval,
//! policy and drift models, canonical JSON, the clock — is the leaf crate `sallyport-vocab`,
//! which depends on no other sallyport crate. This crate re-exports it at the paths below
//! (whole modules for [`outcome`], [`code`], [`session`] and [`clock`]; the rest beside the
//! traits and services that use them), which are the paths to name.
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
//! - [`journal`]: durable intents and the hash-chained audit log: the [`Journal`](journal::Journal) trait, chain
//!   hashing and head signing (the SQLite journal is `sallyport-sqlite`).
//! - [`vault`]: credentials and the [`Vault`](vault::Vault) trait (the file and keychain vaults are
//!   `sallyport-vault`); [`scrub`]: removing secret values from everything outgoing;
//!   [`inspect`]: the answer guards (credential-shaped values the vault does not know, with
//!   feature `secret-rules`; text that tries to steer the model); [`sensitive`]: personal
//!   data by declaration; [`hooks`]: the host's own checks before a call is sent and on every
//!   answer.
//! - [`code`]: result, audit and consent codes as types; [`after_send`]: the failure rules
//!   every channel shares.
//! - [`channel`]: the transport trait; [`target`]: the HTTP and SSH templates actions carry.
//! - [`telemetry`]: OpenTelemetry spans per call (feature `otel`), with their attribute names.
//! - [`clock`]: the one clock every time sallyport writes or compares is read from.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod action;
pub mod after_send;
pub mod approval;
pub mod catalog;
pub mod channel;
pub mod consent;
pub mod danger;
pub mod drift;
pub mod executor;
mod hex;
pub mod hooks;
pub mod inspect;
pub mod journal;
mod payload;
mod pointer;
pub mod policy;
pub mod scrub;
pub mod sensitive;
pub mod target;
pub mod telemetry;
pub mod vault;

#[doc(inline)]
pub use sallyport_vocab::{clock, code, outcome, session};

#[cfg(test)]
mod string_enums;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use sallyport_macros::Action;
pub use sallyport_macros::Sensitive;

// The root holds what the README and the crate guides name; every other item is named by its
// module (`outcome::ActionResult`, `journal::Journal`, `code::UpstreamCode`, …).
pub use crate::action::{Action, ActionSpec, EffectClass};
pub use crate::approval::ConsentMode;
pub use crate::catalog::Catalog;
pub use crate::channel::Channel;
pub use crate::code::RefusalCode;
pub use crate::executor::Executor;
pub use crate::outcome::Status;
pub use crate::session::Session;
