//! Unlocking without a person at a terminal: the passphrase from a private file or from an
//! environment variable, read into zeroized memory and never put in an error.

use std::path::Path;

use zeroize::Zeroizing;

use super::FileVault;
use sallyport_kernel::vault::VaultError;

impl FileVault {
    /// Unlocks the vault with the passphrase in the file at `path`: its first line, without
    /// the line break (as `sallyport --passphrase-file` reads it). Meant for services: a file
    /// your service manager provides (systemd's `LoadCredential=`, a Kubernetes secret
    /// volume) or one you `chmod 600`.
    ///
    /// On Unix the file must not be readable or writable by group or others; a file that is
    /// is refused before it is read, as `ssh` refuses an open private key.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), sallyport_kernel::vault::VaultError> {
    /// let vault = sallyport_vault::FileVault::open("/var/lib/myapp/vault.sallyport");
    /// vault.unlock_with_passphrase_file("/run/credentials/myapp.service/vault-passphrase")?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`VaultError::Io`] when the file cannot be read; [`VaultError::Invalid`] when group or
    /// others may read or write it, or its first line is empty; then as
    /// [`FileVault::unlock`]. No error contains the passphrase.
    pub fn unlock_with_passphrase_file(&self, path: impl AsRef<Path>) -> Result<(), VaultError> {
        let path = path.as_ref();
        let io = |source| VaultError::Io {
            action: "read the passphrase file",
            path: path.display().to_string(),
            source,
        };
        check_private(path).map_err(|e| match e {
            Private::Io(source) => io(source),
            Private::Open(mode) => VaultError::Invalid(format!(
                "the passphrase file {} has mode {mode:04o}: group or others may read or \
                 write it; run `chmod 600` on it",
                path.display()
            )),
        })?;
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(io)?);
        let first = first_line(&text);
        if first.is_empty() {
            return Err(VaultError::Invalid(format!(
                "the passphrase file {} is empty",
                path.display()
            )));
        }
        self.unlock(first)
    }

    /// Unlocks the vault with the passphrase in the environment variable `var` (for a
    /// container or a service manager that injects secrets as variables). The value is used
    /// as it is, trailing line break included; an unset, empty or non-UTF-8 variable is
    /// refused.
    ///
    /// The variable stays in the process's environment, where its children and anyone who
    /// may read `/proc/<pid>/environ` can see it; prefer
    /// [`unlock_with_passphrase_file`](Self::unlock_with_passphrase_file) where you can.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), sallyport_kernel::vault::VaultError> {
    /// let vault = sallyport_vault::FileVault::open("vault.sallyport");
    /// vault.unlock_from_env("MYAPP_VAULT_PASSPHRASE")?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`VaultError::Invalid`] when the variable is unset, empty or not UTF-8; then as
    /// [`FileVault::unlock`]. No error contains the passphrase.
    pub fn unlock_from_env(&self, var: &str) -> Result<(), VaultError> {
        let value = match std::env::var(var) {
            Ok(value) => Zeroizing::new(value),
            Err(std::env::VarError::NotPresent) => {
                return Err(VaultError::Invalid(format!(
                    "the environment variable `{var}` that should hold the vault passphrase is not set"
                )));
            }
            Err(std::env::VarError::NotUnicode(raw)) => {
                drop(Zeroizing::new(raw.into_encoded_bytes()));
                return Err(VaultError::Invalid(format!(
                    "the environment variable `{var}` is not valid UTF-8"
                )));
            }
        };
        if value.is_empty() {
            return Err(VaultError::Invalid(format!(
                "the environment variable `{var}` that should hold the vault passphrase is empty"
            )));
        }
        self.unlock(&value)
    }
}

/// The first line of a passphrase file, without its line break (`\n` or `\r\n`).
fn first_line(text: &str) -> &str {
    let line = text.split('\n').next().unwrap_or_default();
    line.strip_suffix('\r').unwrap_or(line)
}

enum Private {
    Io(std::io::Error),
    Open(u32),
}

#[cfg(unix)]
fn check_private(path: &Path) -> Result<(), Private> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(Private::Io)?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o077 != 0 {
        return Err(Private::Open(mode));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(path: &Path) -> Result<(), Private> {
    std::fs::metadata(path).map(|_| ()).map_err(Private::Io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KdfParams;
    use sallyport_kernel::vault::{
        Binding, CredentialKind, CredentialMeta, Secret, Vault, VaultAdmin, VaultState,
    };

    const PASSPHRASE: &str = "correct horse battery staple";

    /// A vault holding one credential, locked again, in a fresh directory.
    fn locked_vault() -> (tempfile::TempDir, FileVault) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("vault.sallyport");
        let vault =
            FileVault::create(&path, PASSPHRASE, KdfParams::new(8 * 1024, 1, 1)).expect("create");
        vault
            .add(
                CredentialMeta::new(
                    "deploy-api",
                    CredentialKind::Bearer,
                    Binding::url("https://deploy.example.com"),
                ),
                Secret::new("token-value"),
            )
            .expect("add");
        drop(vault);
        (dir, FileVault::open(&path))
    }

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).expect("write");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
        #[cfg(not(unix))]
        let _ = mode;
    }

    #[tokio::test]
    async fn a_private_passphrase_file_unlocks_and_its_line_break_is_not_part_of_it() {
        let (dir, vault) = locked_vault();
        let file = dir.path().join("passphrase");
        write(
            &file,
            &format!("{PASSPHRASE}\r\nignored second line\n"),
            0o600,
        );
        vault.unlock_with_passphrase_file(&file).expect("unlock");
        assert_eq!(vault.state(), VaultState::Unlocked);
        let credential = vault.resolve("deploy-api").await.expect("resolve");
        assert_eq!(credential.secret().expose(), "token-value");
    }

    #[cfg(unix)]
    #[test]
    fn a_passphrase_file_others_can_read_is_refused_before_it_is_read() {
        let (dir, vault) = locked_vault();
        let file = dir.path().join("passphrase");
        write(&file, PASSPHRASE, 0o644);
        let err = vault.unlock_with_passphrase_file(&file).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, VaultError::Invalid(_)),
            "expected Invalid, got {err:?}"
        );
        assert!(text.contains("mode 0644"), "{text}");
        assert!(text.contains("chmod 600"), "{text}");
        assert!(!text.contains(PASSPHRASE), "{text}");
        assert_eq!(vault.state(), VaultState::Locked);
    }

    #[test]
    fn a_wrong_passphrase_in_the_file_is_wrong_passphrase_and_not_echoed() {
        let (dir, vault) = locked_vault();
        let file = dir.path().join("passphrase");
        write(&file, "not the passphrase\n", 0o600);
        let err = vault.unlock_with_passphrase_file(&file).unwrap_err();
        assert!(
            matches!(err, VaultError::WrongPassphrase { .. }),
            "expected WrongPassphrase, got {err:?}"
        );
        assert!(!format!("{err} {err:?}").contains("not the passphrase"));
        assert_eq!(vault.state(), VaultState::Locked);
    }

    #[test]
    fn an_empty_or_missing_passphrase_file_is_refused_with_its_path() {
        let (dir, vault) = locked_vault();
        let empty = dir.path().join("empty");
        write(&empty, "\n", 0o600);
        let err = vault.unlock_with_passphrase_file(&empty).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "invalid credential: the passphrase file {} is empty",
                empty.display()
            )
        );
        let missing = dir.path().join("missing");
        let err = vault.unlock_with_passphrase_file(&missing).unwrap_err();
        assert!(
            matches!(
                &err,
                VaultError::Io { action: "read the passphrase file", source, .. }
                    if source.kind() == std::io::ErrorKind::NotFound
            ),
            "expected a NotFound Io error, got {err:?}"
        );
        assert_eq!(vault.state(), VaultState::Locked);
    }

    const ENV_PASSPHRASE: &str = "SALLYPORT_VAULT_TEST_PASSPHRASE_7F3A";
    const ENV_EMPTY: &str = "SALLYPORT_VAULT_TEST_EMPTY_7F3A";
    const ENV_UNSET: &str = "SALLYPORT_VAULT_TEST_UNSET_7F3A";
    const ENV_VAULT: &str = "SALLYPORT_VAULT_TEST_PATH_7F3A";

    // `std::env::set_var` is `unsafe` in edition 2024 (another thread may read the
    // environment meanwhile) and this crate forbids `unsafe`, so the variables are given to a
    // second run of this test binary, which runs `env_unlock_in_a_child` with them.
    #[test]
    fn the_passphrase_from_the_environment_unlocks_the_vault() {
        let (_dir, vault) = locked_vault();
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "file::passphrase::tests::env_unlock_in_a_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV_PASSPHRASE, PASSPHRASE)
            .env(ENV_EMPTY, "")
            .env_remove(ENV_UNSET)
            .env(ENV_VAULT, vault.path())
            .output()
            .expect("child test runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {stdout}");
        assert!(stdout.contains("1 passed"), "{stdout}");
        assert!(stdout.contains("child: unlocked, token-value"), "{stdout}");
        assert!(!stdout.contains(PASSPHRASE), "{stdout}");
        // This process's own instance never saw the passphrase.
        assert_eq!(vault.state(), VaultState::Locked);
    }

    /// Without the variables (a plain `cargo test`): an unset variable is refused with its
    /// name. As the child of the test above: an empty one is refused too, and the set one
    /// unlocks the vault.
    #[tokio::test]
    async fn env_unlock_in_a_child() {
        let path = std::env::var(ENV_VAULT).ok();
        let (_dir, vault) = match &path {
            Some(path) => (None, FileVault::open(path)),
            None => {
                let (dir, vault) = locked_vault();
                (Some(dir), vault)
            }
        };
        let err = vault.unlock_from_env(ENV_UNSET).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "invalid credential: the environment variable `{ENV_UNSET}` that should hold \
                 the vault passphrase is not set"
            )
        );
        assert_eq!(vault.state(), VaultState::Locked);
        if path.is_none() {
            return;
        }
        let err = vault.unlock_from_env(ENV_EMPTY).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "invalid credential: the environment variable `{ENV_EMPTY}` that should hold \
                 the vault passphrase is empty"
            )
        );
        vault
            .unlock_from_env(ENV_PASSPHRASE)
            .expect("unlock from env");
        let credential = vault.resolve("deploy-api").await.expect("resolve");
        let state = match vault.state() {
            VaultState::Unlocked => "unlocked",
            _ => "locked",
        };
        println!("child: {state}, {}", credential.secret().expose());
    }
}
