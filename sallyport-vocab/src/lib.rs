//! sallyport-vocab: the words every part of sallyport shares, in a crate that depends on no
//! other sallyport crate.
//!
//! **Most programs name [`sallyport-core`](https://docs.rs/sallyport-core) instead**, which
//! re-exports everything here at its usual paths (`sallyport_core::outcome::Status`,
//! `sallyport_core::approval::Approval`, …). This crate exists so that the layering is a Cargo
//! fact: the journal, results, channels and the executor in `sallyport-kernel` all speak this
//! vocabulary, and nothing here can reach back up to them.
//!
//! # Modules
//!
//! - [`outcome`]: what an agent is told — [`outcome::ActionResult`], its five
//!   [`outcome::Status`]es, who decided ([`outcome::Origin`]) and an executor
//!   [`outcome::Refusal`].
//! - [`code`]: result, audit and consent codes as types.
//! - [`action`]: effect classes, consent and retry rules, externality, data classes and the
//!   objects a call names.
//! - [`session`]: sessions and their scope.
//! - [`journal`]: the ids of attempts, receipts and idempotency keys, and the [`journal::Phase`]s
//!   an attempt goes through.
//! - [`approval`]: parked calls and where their approval stands.
//! - [`policy`]: what a host policy decided.
//! - [`hook`]: what the host's own hooks did to a call, as its audit record names it.
//! - [`drift`]: canonical JSON and its hash, payload divergences, the Drift Decision Object.
//! - [`clock`]: the one clock every time sallyport writes or compares is read from.
//!
//! Every fieldless enum whose variants travel as strings is declared with [`string_enum!`],
//! which derives its `as_str`, `Display`, `FromStr` and serde names from one table.

pub mod action;
pub mod approval;
pub mod clock;
pub mod code;
pub mod drift;
pub mod finding;
pub mod hook;
mod ids;
pub mod journal;
mod names;
pub mod outcome;
pub mod policy;
pub mod session;

/// Longest reason kept or shown: a refusal's, a precondition's, a policy's, an upstream
/// answer's and an approval decision's. The scrubber cuts shown texts at this many bytes; an
/// approval decision's reason is cut at this many characters.
pub const MAX_REASON: usize = 500;

/// Longest action name kept (an agent may call any name), in the call's record and its
/// span; a span's tool-call id is cut to the same length.
pub const MAX_ACTION_NAME: usize = 128;

/// What [`string_enum!`]'s expansion names, and the checks every string enum's test runs.
/// Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::names::{check_string_enum, deserialize_name};
    pub use serde;
}
