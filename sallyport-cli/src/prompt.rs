//! Reading secrets: a no-echo terminal prompt, or standard input lines when it is not a
//! terminal. Never arguments or environment variables.

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;

use zeroize::Zeroizing;

use crate::exit::{Exit, Failure};

/// Reads secrets in order from one source.
pub(crate) struct Prompter {
    tty: bool,
    passphrase_file: Option<PathBuf>,
}

impl Prompter {
    pub(crate) fn new(passphrase_file: Option<PathBuf>) -> Self {
        Self {
            tty: std::io::stdin().is_terminal(),
            passphrase_file,
        }
    }

    /// One secret line, prompted with `label` on a terminal.
    pub(crate) fn secret(&self, label: &str) -> Result<Zeroizing<String>, Failure> {
        let value = if self.tty {
            rpassword::prompt_password(format!("{label}: "))
                .map(Zeroizing::new)
                .map_err(|e| Failure::new(Exit::Failure, format!("cannot read {label}: {e}")))?
        } else {
            let mut line = Zeroizing::new(String::new());
            let n = std::io::stdin()
                .lock()
                .read_line(&mut line)
                .map_err(|e| Failure::new(Exit::Failure, format!("cannot read {label}: {e}")))?;
            if n == 0 {
                return Err(Failure::new(
                    Exit::Usage,
                    format!("standard input ended before {label} was given"),
                ));
            }
            trim_newline(line)
        };
        if value.is_empty() {
            return Err(Failure::new(Exit::Usage, format!("{label} is empty")));
        }
        Ok(value)
    }

    /// An OpenSSH private key: lines up to and including the `-----END …-----` line.
    pub(crate) fn private_key(&self, label: &str) -> Result<Zeroizing<String>, Failure> {
        if self.tty {
            eprintln!("{label}: paste the key (not echoed); input ends at its -----END line");
        }
        let mut key = Zeroizing::new(String::new());
        loop {
            let line = if self.tty {
                Zeroizing::new(rpassword::read_password().map_err(|e| {
                    Failure::new(Exit::Failure, format!("cannot read {label}: {e}"))
                })?)
            } else {
                let mut line = Zeroizing::new(String::new());
                let n = std::io::stdin().lock().read_line(&mut line).map_err(|e| {
                    Failure::new(Exit::Failure, format!("cannot read {label}: {e}"))
                })?;
                if n == 0 {
                    return Err(Failure::new(
                        Exit::Usage,
                        format!("{label} ended before its -----END line"),
                    ));
                }
                trim_newline(line)
            };
            if key.is_empty() && line.trim().is_empty() {
                continue;
            }
            key.push_str(line.trim_end());
            key.push('\n');
            if line.trim_start().starts_with("-----END ") {
                break;
            }
            if !key.starts_with("-----BEGIN ") {
                return Err(Failure::new(
                    Exit::Usage,
                    format!("{label} does not start with a -----BEGIN line"),
                ));
            }
        }
        Ok(key)
    }

    /// The vault passphrase: from `--passphrase-file`, else prompted.
    pub(crate) fn passphrase(&self) -> Result<Zeroizing<String>, Failure> {
        if let Some(path) = &self.passphrase_file {
            let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
                Failure::new(
                    Exit::Failure,
                    format!("cannot read the passphrase file {}: {e}", path.display()),
                )
            })?);
            let first = Zeroizing::new(text.lines().next().unwrap_or_default().to_owned());
            if first.is_empty() {
                return Err(Failure::new(Exit::Usage, "the passphrase file is empty"));
            }
            return Ok(first);
        }
        self.secret("Vault passphrase")
    }

    /// A new vault passphrase: asked twice on a terminal.
    pub(crate) fn new_passphrase(&self) -> Result<Zeroizing<String>, Failure> {
        if self.passphrase_file.is_some() || !self.tty {
            return self.passphrase();
        }
        let first = self.secret("New vault passphrase")?;
        let second = self.secret("Repeat the passphrase")?;
        if *first != *second {
            return Err(Failure::new(Exit::Usage, "the passphrases differ"));
        }
        Ok(first)
    }
}

fn trim_newline(mut line: Zeroizing<String>) -> Zeroizing<String> {
    while line.ends_with(['\n', '\r']) {
        line.pop();
    }
    line
}
