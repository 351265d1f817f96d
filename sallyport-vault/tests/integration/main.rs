//! The vaults against real storage, one module per area, linked into one test binary: the
//! encrypted file vault on real files (and the executor's `vault_locked` refusal), and the
//! keychain vault on the real Linux keychains (run inside `tests/keychain-session.sh`, as
//! `bash tests/run.sh` does). The shared action, channel and credential helpers are
//! `sallyport_tests::vault_rig`.
//!
//! Run one area with its module path, e.g.
//! `cargo test -p sallyport-vault --test integration vault_file::`.

mod vault_file;
mod vault_file_certificates;
mod vault_file_grants;
mod vault_keychain;
