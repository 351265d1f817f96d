//! Where vault files live by default, and the lock marker another process uses to lock a vault.

use std::path::{Path, PathBuf};

/// The per-user data directory sallyport keeps its files in:
/// `$XDG_DATA_HOME/sallyport` or `~/.local/share/sallyport` on Linux and other Unixes,
/// `~/Library/Application Support/sallyport` on macOS, `%APPDATA%\sallyport` on Windows.
/// `None` when no home directory is known.
pub fn default_data_dir() -> Option<PathBuf> {
    let env_dir = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if cfg!(windows) {
        return env_dir("APPDATA").map(|d| d.join("sallyport"));
    }
    if cfg!(target_os = "macos") {
        return env_dir("HOME").map(|h| h.join("Library/Application Support/sallyport"));
    }
    env_dir("XDG_DATA_HOME")
        .or_else(|| env_dir("HOME").map(|h| h.join(".local/share")))
        .map(|d| d.join("sallyport"))
}

/// The lock marker of the vault stored at `path`: `<path>.locked`.
///
/// While the marker exists, every vault opened on that path reports
/// [`VaultState::Locked`](super::VaultState::Locked), drops its keys and zeroizes its secrets
/// (checked on every `state()` and `resolve()`). Writing it needs no passphrase, so any
/// process of the same user can stop a running executor from using credentials
/// (`sallyport vault lock`); unlocking with the passphrase removes it.
pub fn lock_marker_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".locked");
    path.with_file_name(name)
}
