//! The upstream's OpenAPI document attached to the channel, and the compiled guard of each
//! action's operation: compiled in `build()` for the actions of the catalog the channel was
//! given, or on an action's first call otherwise.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use sallyport_core::Catalog;
use sallyport_core::drift::DriftMode;
use sallyport_core::drift::openapi::{OpenApi, OpenApiError, OperationGuard, OperationSelector};
use sallyport_core::outcome::{Refusal, RefusalCode};
use sallyport_core::target::{HttpTarget, Target};

use crate::error::BuildError;

/// The route of one HTTP action: `(action, method, path template)`.
pub(crate) type ActionRoute = (String, String, String);

/// The routes of `catalog`'s HTTP actions.
pub(crate) fn routes(catalog: &Catalog) -> Vec<ActionRoute> {
    catalog
        .entries()
        .filter_map(|entry| match &entry.spec().target {
            Target::Http(target) => Some((
                entry.spec().name.to_string(),
                target.method.as_str().to_owned(),
                target.path.to_string(),
            )),
            _ => None,
        })
        .collect()
}

/// The document, the drift mode its checks run in, and one compiled guard per action.
pub(crate) struct OpenApiGuards {
    document: Arc<OpenApi>,
    mode: DriftMode,
    /// `None`: the action has no operation and the mode lets it through unchecked.
    guards: Mutex<HashMap<String, Option<Arc<OperationGuard>>>>,
}

impl OpenApiGuards {
    /// Compiles the guard of every route now.
    ///
    /// In `strict` mode every error fails; in `warn` and `shadow` an action with no operation
    /// in the document is sent unchecked (as on its first call), while a document that has
    /// the operation but cannot check it (a self-referencing schema, a `$ref` to nothing)
    /// still fails here.
    pub(crate) fn compile(
        document: Arc<OpenApi>,
        mode: DriftMode,
        routes: &[ActionRoute],
    ) -> Result<Self, BuildError> {
        let mut guards = HashMap::new();
        for (action, method, path) in routes {
            match document.operation(&OperationSelector::route(method.as_str(), path.as_str())) {
                Ok(guard) => {
                    guards.insert(action.clone(), Some(Arc::new(guard)));
                }
                Err(OpenApiError::NoOperation(_)) if mode != DriftMode::Strict => {
                    guards.insert(action.clone(), None);
                }
                Err(source) => {
                    return Err(BuildError::OpenApi {
                        action: action.clone(),
                        source,
                    });
                }
            }
        }
        Ok(Self {
            document,
            mode,
            guards: Mutex::new(guards),
        })
    }

    /// The drift mode of the checks.
    pub(crate) fn mode(&self) -> DriftMode {
        self.mode
    }

    /// The guard of `action` (compiled now if `build()` did not), or `None` when the action is
    /// sent unchecked.
    ///
    /// # Errors
    ///
    /// In `strict` mode, an `invalid_request` refusal when the document has no operation for
    /// the action or cannot check it.
    pub(crate) fn guard(
        &self,
        action: &str,
        target: &HttpTarget,
    ) -> Result<Option<Arc<OperationGuard>>, Refusal> {
        // A poisoned map holds only finished guards: a panic cannot leave one half-built.
        let mut guards = self.guards.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(guard) = guards.get(action) {
            return Ok(guard.clone());
        }
        let selector = OperationSelector::route(target.method.as_str(), target.path.as_ref());
        let guard = match self.document.operation(&selector) {
            Ok(guard) => Some(Arc::new(guard)),
            Err(_) if self.mode != DriftMode::Strict => None,
            Err(OpenApiError::NoOperation(_)) => {
                return Err(Refusal::new(
                    RefusalCode::InvalidRequest,
                    format!(
                        "the upstream's OpenAPI document has no operation {} {}",
                        target.method.as_str(),
                        target.path
                    ),
                ));
            }
            Err(e) => {
                return Err(Refusal::new(
                    RefusalCode::InvalidRequest,
                    format!(
                        "the upstream's OpenAPI operation {} {} cannot be checked: {e}",
                        target.method.as_str(),
                        target.path
                    ),
                ));
            }
        };
        guards.insert(action.to_owned(), guard.clone());
        Ok(guard)
    }
}
