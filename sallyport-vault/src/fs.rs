//! Files with private modes (files 0600, directories 0700 on Unix) and the lock marker,
//! shared by both vaults.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

/// Options that create files readable by their owner only (0600 on Unix).
pub(crate) fn private_options() -> OpenOptions {
    #[allow(unused_mut, reason = "mode is only set on Unix")]
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
}

/// Creates `dir` and its parents with mode 0700 (on Unix) unless it exists.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Writes the lock marker for a vault (used by the file vault's `lock_everywhere` and the
/// keychain vault).
pub(crate) fn write_lock_marker(marker: &Path) -> std::io::Result<()> {
    if let Some(dir) = marker.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir)?;
    }
    let mut file = private_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(marker)?;
    file.write_all(b"locked by sallyport; unlock with the passphrase to remove\n")?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_marker_gets_a_private_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("deep/er/vault.spv.locked");
        write_lock_marker(&marker).expect("marker");
        assert!(marker.is_file());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let dir_mode = fs::metadata(dir.path().join("deep/er"))
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(dir_mode & 0o777, 0o700);
            let mode = fs::metadata(&marker).expect("stat").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
