//! The file vault's file operations: a bounded read, the write lock (`<path>.lock`), the
//! atomic replace (temporary file in the same directory, fsync, rename, fsync of the
//! directory); private modes and the lock marker are in `crate::fs`.
//!
//! Errors name the vault file and what was being done to it, never its contents.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use super::crypto::random_bytes;
use crate::fs::private_options;
use sallyport_kernel::vault::VaultError;

/// Largest vault file read (a vault holds credentials, not data).
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// A [`VaultError::Io`] for `action` on the vault file at `path`.
pub(super) fn io_error(path: &Path, action: &'static str, source: std::io::Error) -> VaultError {
    VaultError::Io {
        action,
        path: path.display().to_string(),
        source,
    }
}

/// Reads the whole vault file at `path`.
///
/// # Errors
///
/// [`VaultError::NotInitialized`] when there is no file, [`VaultError::Corrupt`] when it is
/// larger than any vault, [`VaultError::Io`] otherwise.
pub(super) fn read(path: &Path) -> Result<Vec<u8>, VaultError> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(VaultError::NotInitialized {
                path: path.display().to_string(),
            });
        }
        Err(e) => return Err(io_error(path, "read", e)),
    };
    let len = file
        .metadata()
        .map_err(|e| io_error(path, "read", e))?
        .len();
    if len > MAX_FILE_BYTES {
        return Err(VaultError::Corrupt {
            path: path.display().to_string(),
            detail: "file is larger than any vault".into(),
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.read_to_end(&mut bytes)
        .map_err(|e| io_error(path, "read", e))?;
    Ok(bytes)
}

/// Takes the exclusive write lock of the vault at `path` (`<path>.lock`, created mode 0600);
/// held until the returned file is dropped. Blocks while another writer, in this process or
/// another, holds it.
pub(super) fn write_lock(path: &Path) -> Result<File, VaultError> {
    held_lock(
        path,
        ".lock",
        ["open the write lock of", "take the write lock of"],
    )
}

/// Takes the exclusive refresh lock of the vault at `path` (`<path>.refresh`, mode 0600),
/// waiting up to `wait` while another process holds it: one OAuth refresh at a time among
/// every process on the file. Apart from the write lock, which the refresh's own write
/// takes while this is held. Released when the returned file is closed, or its process dies.
pub(super) fn refresh_lock(path: &Path, wait: Duration) -> Result<File, VaultError> {
    let file = open_lock_file(path, &beside(path, ".refresh"), "open the refresh lock of")?;
    lock_within(path, file, wait)
}

/// Locks `file` exclusively, trying again every few milliseconds for up to `wait`: a
/// holder that never lets go (a process stopped mid-refresh) refuses this refresh instead
/// of stopping its call for as long as the holder lives.
fn lock_within(path: &Path, file: File, wait: Duration) -> Result<File, VaultError> {
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(fs::TryLockError::WouldBlock) => {}
            Err(fs::TryLockError::Error(e)) => {
                return Err(io_error(path, "take the refresh lock of", e));
            }
        }
        if started.elapsed() >= wait {
            return Err(VaultError::Backend(format!(
                "another process has kept the refresh lock of {} for over {} ms; nothing was refreshed",
                path.display(),
                wait.as_millis()
            )));
        }
        std::thread::sleep(pause.min(wait.saturating_sub(started.elapsed())));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Takes the exclusive refresh lock of one subject's grant of credential `credential` in the
/// vault at `path`: `<path>.refresh.d/<hash>` (the directory mode 0700, the file 0600; the
/// hash is SHA-256 over credential and subject, so any subject string names one file and no
/// subject appears in a file name). Grants of different subjects refresh in parallel; the
/// same subject's grant one process at a time. Released when the returned file is closed,
/// or its process dies. The lock files stay (removing one another process may hold would
/// break the exclusion).
pub(super) fn subject_refresh_lock(
    path: &Path,
    credential: &str,
    subject: &str,
    wait: Duration,
) -> Result<File, VaultError> {
    use sha2::{Digest, Sha256};
    let mut dir_name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    dir_name.push(".refresh.d");
    let dir = path.with_file_name(dir_name);
    crate::fs::create_private_dir(&dir)
        .map_err(|e| io_error(path, "create the refresh lock directory of", e))?;
    let mut hash = Sha256::new();
    hash.update(credential.as_bytes());
    hash.update([0]);
    hash.update(subject.as_bytes());
    let lock_path = dir.join(hex::encode(&hash.finalize()[..16]));
    let file = open_lock_file(path, &lock_path, "open the refresh lock of")?;
    lock_within(path, file, wait)
}

/// Opens `<path><suffix>` and locks it exclusively; `actions` name the two steps in errors.
fn held_lock(path: &Path, suffix: &str, actions: [&'static str; 2]) -> Result<File, VaultError> {
    let file = open_lock_file(path, &beside(path, suffix), actions[0])?;
    file.lock().map_err(|e| io_error(path, actions[1], e))?;
    Ok(file)
}

/// `<path><suffix>`: a file beside the vault's.
fn beside(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(suffix);
    path.with_file_name(name)
}

/// Opens (creating it, mode 0600) the lock file `lock_path` of the vault at `path`; `action`
/// names the step in errors, which name the vault.
fn open_lock_file(path: &Path, lock_path: &Path, action: &'static str) -> Result<File, VaultError> {
    private_options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(lock_path)
        .map_err(|e| io_error(path, action, e))
}

/// Replaces the file at `path` with `bytes` atomically: a temporary file (mode 0600) in the
/// same directory, fsync, rename over `path`, fsync of the directory. On failure the
/// temporary file is removed and `path` is left as it was.
pub(super) fn replace(path: &Path, bytes: &[u8]) -> Result<(), VaultError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let suffix = hex::encode(random_bytes::<8>()?);
    let tmp = dir.join(format!(".{file_name}.tmp-{suffix}"));
    let result = (|| {
        let mut file = private_options().write(true).create_new(true).open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(io_error(path, "write", e));
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_swaps_the_whole_file_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("vault.spv");
        replace(&path, b"first").expect("write");
        replace(&path, b"second, longer").expect("replace");
        assert_eq!(read(&path).expect("read"), b"second, longer");
        let names: Vec<String> = fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["vault.spv"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).expect("stat").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_missing_file_reads_as_not_initialized() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("absent.spv");
        assert!(matches!(
            read(&path),
            Err(VaultError::NotInitialized { path: p }) if p == path.display().to_string()
        ));
    }
}
