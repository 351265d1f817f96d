//! Shared helpers for sallyport integration tests.

pub mod http_server;
pub mod postgres;
pub mod scripted;
pub mod sshd;
