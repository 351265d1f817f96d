//! The result of a typed call from Rust ([`Executor::run`](crate::Executor::run)): the
//! pipeline's [`ActionResult`], and its data decoded as the action's declared result type.

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::outcome::{ActionResult, Status};

/// What [`Executor::run`](crate::Executor::run) returns: every status the pipeline can report,
/// truthfully, plus the call's data decoded as the action's
/// [`Action::Output`](crate::Action::Output).
///
/// The status is the one the agent would see: a `pending`, `unknown` or `rejected` call is
/// never presented as done. [`TypedResult::completed`] is the short way to the data of a
/// `completed` call; anything else comes back whole, so the caller still has the code, the
/// reason and the `next` call.
///
/// ```no_run
/// # use sallyport_core::{Action, Executor, Session, Status};
/// # use serde::{Deserialize, Serialize}; use schemars::JsonSchema;
/// /// Read one invoice.
/// #[derive(Action, Deserialize, Serialize, JsonSchema)]
/// #[action(name = "get_invoice", effect = observe)]
/// #[http(get = "/v1/invoices/{invoice_id}", result = Invoice)]
/// struct GetInvoice { invoice_id: String }
///
/// #[derive(Deserialize, Serialize, JsonSchema)]
/// struct Invoice { invoice_id: String, status: String }
///
/// # async fn demo(executor: Executor) {
/// let session = Session::new("chat-1");
/// let call = GetInvoice { invoice_id: "inv_1".into() };
/// match executor.run(&call, &session).await.completed() {
///     Ok(invoice) => println!("{} is {}", invoice.invoice_id, invoice.status),
///     Err(other) => match other.status() {
///         Status::Unknown => println!("check later: {:?}", other.result.next),
///         _ => println!("not done: {}", other.result.to_json()),
///     },
/// }
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TypedResult<T> {
    /// The result exactly as [`Executor::call`](crate::Executor::call) returns it (its
    /// untyped `data` included): status, code, reason, `next`, attempt and receipt ids.
    pub result: ActionResult,
    /// `result.data`, decoded: `Some` when the call returned data of the declared type (or
    /// returned none and the type needs none, as `()`), `None` otherwise.
    pub data: Option<T>,
    /// Why `result.data` did not decode as the declared type, when the call returned data
    /// that does not. The status is left as the pipeline reported it.
    pub mismatch: Option<DataMismatch>,
}

impl<T: DeserializeOwned> TypedResult<T> {
    /// Decodes `result.data` as `T`.
    pub fn new(result: ActionResult) -> Self {
        let (data, mismatch) = match &result.data {
            Some(value) => match T::deserialize(value) {
                Ok(data) => (Some(data), None),
                Err(e) => (
                    None,
                    Some(DataMismatch {
                        reason: crate::drift::describe_serde_error(&e),
                    }),
                ),
            },
            // No data: `()` (and `Option<_>`) still decode; a struct does not, and that is
            // no mismatch, since most statuses carry no data.
            None => (T::deserialize(&Value::Null).ok(), None),
        };
        Self {
            result,
            data,
            mismatch,
        }
    }
}

impl<T> TypedResult<T> {
    /// The status the pipeline reported.
    pub fn status(&self) -> Status {
        self.result.status
    }

    /// The decoded data of a `completed` call; any other status, a `completed` call without
    /// data of the declared type included, returns the whole result in `Err`.
    ///
    /// # Errors
    ///
    /// `self`, unchanged, unless the status is `completed` and the data decoded.
    #[allow(
        clippy::result_large_err,
        reason = "the whole result comes back so no status is lost; it is matched at once, \
                  and a box would only add an allocation to every refusal"
    )]
    pub fn completed(self) -> Result<T, Self> {
        match self {
            Self {
                result:
                    ActionResult {
                        status: Status::Completed,
                        ..
                    },
                data: Some(data),
                ..
            } => Ok(data),
            other => Err(other),
        }
    }
}

/// The data a call returned does not have the declared result type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the call's data does not match the declared result type: {reason}")]
pub struct DataMismatch {
    reason: String,
}

impl DataMismatch {
    /// What did not match (a field name and the expected type; never a value).
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl<T> fmt::Display for TypedResult<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.result.to_json())
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;
    use crate::journal::AttemptId;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Invoice {
        invoice_id: String,
    }

    fn result(status: Status, data: Option<Value>) -> ActionResult {
        let mut result = ActionResult::new(status, "get_invoice", AttemptId::generate());
        result.data = data;
        result
    }

    #[test]
    fn completed_data_decodes_as_the_declared_type() {
        let typed = TypedResult::<Invoice>::new(result(
            Status::Completed,
            Some(json!({"invoice_id": "inv_1"})),
        ));
        assert_eq!(
            typed.completed().expect("completed"),
            Invoice {
                invoice_id: "inv_1".into()
            }
        );
    }

    #[test]
    fn a_pending_call_keeps_its_status_and_its_data() {
        let typed = TypedResult::<Invoice>::new(result(
            Status::Pending,
            Some(json!({"invoice_id": "inv_2"})),
        ));
        assert_eq!(typed.status(), Status::Pending);
        assert_eq!(
            typed.data.as_ref().map(|i| i.invoice_id.as_str()),
            Some("inv_2")
        );
        let back = typed.completed().expect_err("pending is not completed");
        assert_eq!(back.result.status, Status::Pending);
    }

    #[test]
    fn data_of_another_shape_is_a_mismatch_not_a_panic() {
        let typed = TypedResult::<Invoice>::new(result(Status::Completed, Some(json!({"id": 7}))));
        assert!(typed.data.is_none());
        let mismatch = typed.mismatch.clone().expect("a mismatch");
        assert!(mismatch.reason().contains("invoice_id"), "{mismatch}");
        assert_eq!(
            typed.completed().expect_err("no data").status(),
            Status::Completed
        );
    }

    #[test]
    fn no_data_is_unit_for_a_unit_result_and_nothing_for_a_struct() {
        let unit = TypedResult::<()>::new(result(Status::Completed, None));
        assert_eq!(unit.completed().expect("completed"), ());
        let rejected = TypedResult::<Invoice>::new(result(Status::Rejected, None));
        assert!(rejected.data.is_none());
        assert!(rejected.mismatch.is_none());
    }
}
