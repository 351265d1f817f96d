//! The SSH command template carried in an action card.

use std::borrow::Cow;

use serde::Serialize;

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
    /// Declared exit-code mappings (exit 0 is `completed`).
    pub exits: Vec<ExitRule>,
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
        }
    }

    /// Maps exit `code` to `status`.
    #[must_use]
    pub fn with_exit(mut self, code: u32, status: Status) -> Self {
        self.exits.push(ExitRule { code, status });
        self
    }
}
