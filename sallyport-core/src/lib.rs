//! sallyport-core: typed, narrow agent actions executed through one fixed safety pipeline.
//!
//! (Guide written below once the API settles.)

pub mod action;
pub mod catalog;
pub mod channel;
pub mod consent;
pub mod danger;
pub mod drift;
pub mod executor;
pub mod journal;
pub mod outcome;
pub mod scrub;
pub mod session;
pub mod target;
pub mod vault;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use sallyport_macros::Action;

pub use crate::action::{
    Action, ActionSpec, ConsentRule, DataClass, EffectClass, Externality, RetryRule, ScopedValue,
};
pub use crate::catalog::Catalog;
pub use crate::channel::Channel;
pub use crate::consent::ConsentProvider;
pub use crate::executor::Executor;
pub use crate::journal::Journal;
pub use crate::outcome::{ActionResult, Origin, Status};
pub use crate::session::Session;
pub use crate::vault::Vault;
