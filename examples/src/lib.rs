//! Shared pieces of the sallyport examples: the embedded demo upstream and the demo catalog
//! that the quickstart and the MCP demo serve.

pub mod catalog;
pub mod upstream;
