//! Telling people a call is waiting: the [`ParkNotifier`]s an executor calls when it parks a
//! call, and the [`DeadLetter`]s a notifier leaves when it could not deliver.
//!
//! `sallyport-webhook`'s `Notifier` is the built-in notifier: a signed JSON POST (HMAC-SHA256
//! or Ed25519 over a timestamped body) carrying a link to decide, retried with backoff, and
//! written to a dead-letter file that `sallyport approvals dead-letters` shows when every
//! try failed.

use std::io::{BufRead as _, Write as _};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Approval;

/// Told once for every call the executor parks for a human's approval, after the approval
/// is stored (so a link in the notification already leads to it). Not told again when the
/// same call is asked for while its approval lives.
///
/// `parked` is called on the caller's task, before the agent gets its `pending` answer: it
/// must not block or wait on the network. Start the delivery in the background (the built-in
/// notifier spawns a task on the current Tokio runtime) and return.
pub trait ParkNotifier: Send + Sync + 'static {
    /// A call was parked as `approval`.
    fn parked(&self, approval: &Approval);
}

/// A notification that could not be delivered after every try: what it was about, where it
/// went, and why it failed. One JSON line each in a dead-letter file; never a secret, a
/// signature or the notification's body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeadLetter {
    /// When the last try failed (milliseconds since the Unix epoch).
    pub at_ms: u64,
    /// The parked call's approval.
    pub approval_id: String,
    /// The parked call's action.
    pub action: String,
    /// Where the notification was sent.
    pub url: String,
    /// How many tries were made.
    pub attempts: u32,
    /// Why the last try failed (a status code or a transport error, without the URL's query).
    pub last_error: String,
}

impl DeadLetter {
    /// A dead letter for `approval_id` of `action`, sent to `url` `attempts` times.
    pub fn new(
        approval_id: impl Into<String>,
        action: impl Into<String>,
        url: impl Into<String>,
        attempts: u32,
        last_error: impl Into<String>,
    ) -> Self {
        Self {
            at_ms: crate::clock::now_ms(),
            approval_id: approval_id.into(),
            action: action.into(),
            url: url.into(),
            attempts,
            last_error: last_error.into(),
        }
    }

    /// Appends this dead letter to the file at `path` (created, mode 0600 on Unix, if
    /// missing) as one JSON line.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened or written.
    pub fn append_to(&self, path: &Path) -> std::io::Result<()> {
        let mut options = std::fs::OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let mut file = options.open(path)?;
        let mut line = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        line.push(b'\n');
        // One write per line, in append mode: lines of concurrent writers do not interleave.
        file.write_all(&line)
    }

    /// Every dead letter in the file at `path`, oldest first; an absent file has none.
    ///
    /// # Errors
    ///
    /// When the file cannot be read, or a line is not a dead letter (its number is in the
    /// message; the file is left as it is).
    pub fn read_all(path: &Path) -> std::io::Result<Vec<Self>> {
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let letter = serde_json::from_str(&line).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("line {} is not a dead letter: {e}", n + 1),
                )
            })?;
            out.push(letter);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_letters_round_trip_and_a_bad_line_is_reported_by_number() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("dead.jsonl");
        assert_eq!(DeadLetter::read_all(&path).expect("absent"), []);
        let one = DeadLetter::new("apr_1", "send_invoice", "http://h/n", 5, "HTTP 503");
        one.append_to(&path).expect("append");
        one.append_to(&path).expect("append");
        assert_eq!(
            DeadLetter::read_all(&path).expect("read"),
            [one.clone(), one]
        );
        std::fs::write(&path, "{\"at_ms\":1}\n").expect("write");
        let error = DeadLetter::read_all(&path).expect_err("bad line");
        assert!(
            error.to_string().starts_with("line 1 is not a dead letter"),
            "{error}"
        );
    }
}
