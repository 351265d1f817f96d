//! Where and how an action's call is sent: the channel target, as plain data.
//!
//! Targets are descriptions, not transports: `sallyport-http` and `sallyport-ssh` interpret
//! them. Keeping them in the card means the canonical definition (and so definition drift)
//! covers the method, path, host and argv an action uses.

mod http;
mod ssh;

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

pub use self::http::{BodyRule, HttpBody, HttpMethod, HttpTarget, StatusResult, StatusRule};
pub use self::ssh::{CommandOutput, ExitRule, SshTarget};
use crate::outcome::Status;

/// The channel target of an action.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "channel", rename_all = "snake_case")]
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "one target per action, built once and kept in the catalog; boxing buys nothing"
)]
pub enum Target {
    /// No channel bound yet; calls are refused with `channel_unavailable`.
    None,
    /// An HTTP request template.
    Http(HttpTarget),
    /// An SSH command template.
    Ssh(SshTarget),
    /// A channel of the application's own, by name, with a definition that is hashed into the
    /// action's canonical form.
    Custom {
        /// The channel name the executor was given.
        name: Cow<'static, str>,
        /// What the channel needs to know; part of the definition hash.
        definition: Value,
    },
}

impl Target {
    /// A custom channel target.
    pub fn custom(name: impl Into<Cow<'static, str>>, definition: Value) -> Self {
        Self::Custom {
            name: name.into(),
            definition,
        }
    }

    /// The name of the channel that serves this target (`http`, `ssh`, or a custom name).
    pub fn channel_name(&self) -> Option<&str> {
        match self {
            Self::None => None,
            Self::Http(_) => Some("http"),
            Self::Ssh(_) => Some("ssh"),
            Self::Custom { name, .. } => Some(name),
        }
    }
}

/// A typed result projection: only the fields of the declared result type reach the agent.
#[derive(Clone)]
pub struct ResultShape {
    /// The result type's JSON Schema (for tool exports' `outputSchema`).
    pub schema: Value,
    project: fn(Value) -> Result<Value, String>,
    project_slice: fn(&[u8]) -> Result<Value, String>,
}

impl ResultShape {
    /// The projection through result type `T`: deserialize (dropping unknown fields), then
    /// serialize.
    pub fn of<T>() -> Self
    where
        T: serde::de::DeserializeOwned + serde::Serialize + schemars::JsonSchema,
    {
        fn reshape<T: serde::Serialize>(
            typed: Result<T, serde_json::Error>,
        ) -> Result<Value, String> {
            let typed = typed.map_err(|e| {
                format!(
                    "response does not match the declared result: {}",
                    sallyport_vocab::drift::describe_serde_error(&e)
                )
            })?;
            serde_json::to_value(typed).map_err(|e| e.to_string())
        }
        fn project<T: serde::de::DeserializeOwned + serde::Serialize>(
            value: Value,
        ) -> Result<Value, String> {
            reshape(serde_json::from_value::<T>(value))
        }
        fn project_slice<T: serde::de::DeserializeOwned + serde::Serialize>(
            body: &[u8],
        ) -> Result<Value, String> {
            reshape(serde_json::from_slice::<T>(body))
        }
        Self {
            schema: schemars::schema_for!(T).to_value(),
            project: project::<T>,
            project_slice: project_slice::<T>,
        }
    }

    /// Projects an upstream value onto the declared result type.
    ///
    /// # Errors
    ///
    /// A short reason when the value does not have the declared shape.
    pub fn project(&self, value: Value) -> Result<Value, String> {
        (self.project)(value)
    }

    /// Projects an upstream JSON body onto the declared result type, decoding it straight
    /// into the type (no intermediate [`Value`]). Stricter than parsing the body and
    /// calling [`project`](Self::project): a body that names one of the type's fields twice
    /// is refused rather than read as its last value, since JSON parsers disagree on which
    /// of the two wins.
    ///
    /// # Errors
    ///
    /// A short reason when the body is not JSON of the declared shape.
    pub fn project_slice(&self, body: &[u8]) -> Result<Value, String> {
        (self.project_slice)(body)
    }
}

impl PartialEq for ResultShape {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema
    }
}

impl std::fmt::Debug for ResultShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultShape")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl Serialize for ResultShape {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.schema.serialize(serializer)
    }
}

/// Serializes a [`Status`] mapping key.
pub(crate) fn status_name(status: Status) -> &'static str {
    status.as_str()
}
