//! The SSH command template carried in an action card.

use std::borrow::Cow;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::outcome::Status;

/// How one exit code maps to an action status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ExitRule {
    /// The remote command's exit code.
    pub code: u32,
    /// The action status it means.
    #[serde(serialize_with = "serialize_status")]
    pub status: Status,
}

fn serialize_status<S: serde::Serializer>(status: &Status, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(super::status_name(*status))
}

/// An SSH command template: the inventory host and an argv with `{field}` placeholders.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SshTarget {
    /// The inventory host name (never an address the agent chose). `{field}` takes the host
    /// from a scoped input field.
    pub host: Cow<'static, str>,
    /// The argv template; each element becomes exactly one remote argument.
    pub argv: Vec<Cow<'static, str>>,
    /// Declared exit-code mappings (exit 0 is `completed` unless declared otherwise).
    pub exits: Vec<ExitRule>,
    /// How long the command may run, from the exec request to its exit status. `None` uses
    /// the channel's default. Part of the definition: a longer timeout is a changed action.
    #[serde(
        rename = "timeout_ms",
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_millis"
    )]
    pub timeout: Option<Duration>,
    /// The most bytes kept per output stream (stdout and stderr each). `None` uses the
    /// channel's default (64 KiB). Output beyond the cap is read and discarded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_cap: Option<usize>,
    /// The fields whose value may begin with `-` where the remote program would read it as an
    /// option. By default the channel refuses such a value (`--checkpoint-action=exec=sh`
    /// reaching `tar` is an option, not a file name) unless the template puts a literal `--`
    /// before it. Part of the definition: allowing a leading dash changes what a call can do.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow_leading_dash: Vec<Cow<'static, str>>,
}

fn serialize_millis<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        None => s.serialize_none(),
    }
}

impl SshTarget {
    /// A template running `argv` on `host`.
    pub fn new<I, S>(host: impl Into<Cow<'static, str>>, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Cow<'static, str>>,
    {
        Self {
            host: host.into(),
            argv: argv.into_iter().map(Into::into).collect(),
            exits: Vec::new(),
            timeout: None,
            output_cap: None,
            allow_leading_dash: Vec::new(),
        }
    }

    /// Maps exit `code` to `status`.
    #[must_use]
    pub fn with_exit(mut self, code: u32, status: Status) -> Self {
        self.exits.retain(|rule| rule.code != code);
        self.exits.push(ExitRule { code, status });
        self
    }

    /// Sets how long the command may run before the call ends (`unknown` for a state-changing
    /// action: a remote command cannot be reliably cancelled).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the most bytes kept per output stream.
    #[must_use]
    pub fn with_output_cap(mut self, bytes: usize) -> Self {
        self.output_cap = Some(bytes);
        self
    }

    /// Lets the value of `field` begin with `-` anywhere in the argv, where the remote program
    /// may read it as an option. Give the field a schema `enum` or `pattern` that admits only
    /// the options you mean; without this, such a value is refused before consent unless a
    /// literal `--` element comes before it.
    #[must_use]
    pub fn with_leading_dash_allowed(mut self, field: impl Into<Cow<'static, str>>) -> Self {
        let field = field.into();
        if !self.allow_leading_dash.contains(&field) {
            self.allow_leading_dash.push(field);
        }
        self
    }

    /// Whether the value of `field` may begin with `-` before a `--` element.
    pub fn leading_dash_allowed(&self, field: &str) -> bool {
        self.allow_leading_dash.iter().any(|f| f == field)
    }

    /// The status a declared exit code maps to, if it is declared.
    pub fn exit_status(&self, code: u32) -> Option<Status> {
        self.exits
            .iter()
            .find(|rule| rule.code == code)
            .map(|rule| rule.status)
    }
}

/// What an SSH action's call returns as its data (the [`Action::Output`](crate::Action::Output)
/// of every `#[ssh]` action): the remote command's output streams, capped at the target's
/// [`output_cap`](SshTarget::output_cap), and how the command ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CommandOutput {
    /// Standard output, as text (lossy UTF-8), at most the cap.
    pub stdout: String,
    /// Standard error, as text (lossy UTF-8), at most the cap.
    pub stderr: String,
    /// How many bytes the command wrote to standard output, kept or not.
    pub stdout_bytes: u64,
    /// How many bytes the command wrote to standard error, kept or not.
    pub stderr_bytes: u64,
    /// Whether standard output was cut at the cap.
    pub stdout_truncated: bool,
    /// Whether standard error was cut at the cap.
    pub stderr_truncated: bool,
    /// The exit status, when the command exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<u32>,
    /// The signal that ended the command, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_output_reads_the_data_the_ssh_channel_returns() {
        let data = serde_json::json!({"stdout": "up 3 days\n", "stderr": "", "stdout_bytes": 10,
            "stderr_bytes": 0, "stdout_truncated": false, "stderr_truncated": false,
            "exit_status": 0});
        let output: CommandOutput = serde_json::from_value(data).unwrap();
        assert_eq!(output.stdout, "up 3 days\n");
        assert_eq!(output.exit_status, Some(0));
        assert_eq!(output.signal, None);
    }

    #[test]
    fn timeout_and_cap_enter_the_definition_only_when_set() {
        let plain = SshTarget::new("web1", ["uptime"]);
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            serde_json::json!({"host": "web1", "argv": ["uptime"], "exits": []})
        );
        let tuned = plain
            .with_timeout(Duration::from_millis(1500))
            .with_output_cap(4096)
            .with_exit(3, Status::AlreadyInDesiredState)
            .with_exit(3, Status::Rejected);
        assert_eq!(
            serde_json::to_value(&tuned).unwrap(),
            serde_json::json!({"host": "web1", "argv": ["uptime"],
                "exits": [{"code": 3, "status": "rejected"}],
                "timeout_ms": 1500, "output_cap": 4096})
        );
        assert_eq!(tuned.exit_status(3), Some(Status::Rejected));
        assert_eq!(tuned.exit_status(4), None);
    }

    #[test]
    fn an_allowed_leading_dash_enters_the_definition_once() {
        let target = SshTarget::new("web1", ["grep", "{pattern}"])
            .with_leading_dash_allowed("pattern")
            .with_leading_dash_allowed("pattern");
        assert_eq!(
            serde_json::to_value(&target).unwrap(),
            serde_json::json!({"host": "web1", "argv": ["grep", "{pattern}"], "exits": [],
                "allow_leading_dash": ["pattern"]})
        );
        assert!(target.leading_dash_allowed("pattern"));
        assert!(!target.leading_dash_allowed("file"));
    }
}
