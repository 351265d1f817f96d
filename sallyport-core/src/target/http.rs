//! The HTTP request template carried in an action card.

use std::borrow::Cow;

use serde::Serialize;

use super::ResultShape;
use crate::outcome::Status;

/// An HTTP method. Never used to infer the effect class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// `DELETE`
    Delete,
    /// `GET`
    Get,
    /// `PATCH`
    Patch,
    /// `POST`
    Post,
    /// `PUT`
    Put,
}

impl HttpMethod {
    /// The method as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delete => "DELETE",
            Self::Get => "GET",
            Self::Patch => "PATCH",
            Self::Post => "POST",
            Self::Put => "PUT",
        }
    }
}

/// How one upstream status code maps to an action status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StatusRule {
    /// The HTTP status code.
    pub code: u16,
    /// The action status it means.
    #[serde(serialize_with = "serialize_status")]
    pub status: Status,
}

fn serialize_status<S: serde::Serializer>(status: &Status, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(super::status_name(*status))
}

/// An HTTP request template: method, path with `{field}` placeholders, where the other fields
/// go, and how responses map to statuses.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct HttpTarget {
    /// The method.
    pub method: HttpMethod,
    /// Path template relative to the channel's base URL, e.g. `/v1/projects/{project_id}`.
    pub path: Cow<'static, str>,
    /// Fields sent as query parameters.
    pub query: Vec<Cow<'static, str>>,
    /// Fields sent as headers: `(header name, field)`.
    pub headers: Vec<(Cow<'static, str>, Cow<'static, str>)>,
    /// Declared status-code mappings (beyond the conservative defaults).
    pub statuses: Vec<StatusRule>,
    /// The declared result type.
    pub result: Option<ResultShape>,
}

impl HttpTarget {
    /// A template for `method` on `path`.
    pub fn new(method: HttpMethod, path: impl Into<Cow<'static, str>>) -> Self {
        Self {
            method,
            path: path.into(),
            query: Vec::new(),
            headers: Vec::new(),
            statuses: Vec::new(),
            result: None,
        }
    }

    /// Sends `field` as a query parameter.
    #[must_use]
    pub fn with_query(mut self, field: impl Into<Cow<'static, str>>) -> Self {
        self.query.push(field.into());
        self
    }

    /// Sends `field` in header `name`.
    #[must_use]
    pub fn with_header(
        mut self,
        name: impl Into<Cow<'static, str>>,
        field: impl Into<Cow<'static, str>>,
    ) -> Self {
        self.headers.push((name.into(), field.into()));
        self
    }

    /// Maps status `code` to `status`.
    #[must_use]
    pub fn with_status(mut self, code: u16, status: Status) -> Self {
        self.statuses.push(StatusRule { code, status });
        self
    }

    /// Declares the result type.
    #[must_use]
    pub fn with_result(mut self, shape: ResultShape) -> Self {
        self.result = Some(shape);
        self
    }
}
