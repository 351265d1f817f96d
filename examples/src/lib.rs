//! Shared pieces of the sallyport examples: the embedded demo upstream, the demo catalog that
//! the quickstart, the examples and the MCP demo serve, and the embedded defaults they share.

pub mod catalog;
pub mod github;
pub mod setup;
pub mod upstream;

/// The README's Rust code blocks, compiled and run as doctests so they cannot rot.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
