//! Shared test rigs: the workspace's flows across crates (this package's `tests/`) and the
//! crates' own tests (`sallyport-core`, `sallyport-http`, `sallyport-ssh`, `sallyport-vault`,
//! `sallyport-cli`, `sallyport-postgres`, ...) use them as a dev-dependency.

pub mod approvals_rig;
pub mod children;
pub mod cluster;
pub mod delay_proxy;
pub mod fleet;
pub mod http_server;
pub mod oidc;
pub mod postgres;
pub mod scripted;
pub mod shadow_rig;
pub mod sshd;
pub mod vault_rig;
