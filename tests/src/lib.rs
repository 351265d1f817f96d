//! Shared helpers for sallyport integration tests.

pub mod approvals_rig;
pub mod http_server;
pub mod postgres;
pub mod scripted;
pub mod sshd;
