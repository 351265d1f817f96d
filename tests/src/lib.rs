//! Shared helpers for sallyport integration tests.

pub mod http_server;
pub mod journal_conformance;
pub mod scripted;
pub mod sshd;
