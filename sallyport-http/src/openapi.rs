//! The upstream's OpenAPI document attached to the channel, and the compiled guard of each
//! action's operation: compiled in `build()` for the actions of the catalog the channel was
//! given, or on an action's first call otherwise.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use reqwest::header::HeaderName;
use sallyport_core::Catalog;
use sallyport_core::action::ActionSpec;
use sallyport_core::action::RetryRule;
use sallyport_core::code::RefusalCode;
use sallyport_core::drift::DriftMode;
use sallyport_core::outcome::Refusal;
use sallyport_core::target::{HttpTarget, Target};
use sallyport_openapi::{OpenApi, OpenApiError, OperationGuard, OperationSelector};
use serde_json::Value;

use crate::error::BuildError;
use crate::request::RequestPlan;
use sallyport_openapi::OutgoingRequest;

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

/// What the channel knows about one action's operation.
#[derive(Clone)]
enum CachedGuard {
    /// The compiled guard.
    Checked(Arc<OperationGuard>),
    /// No guard, and the mode lets the action through unchecked.
    Unchecked,
    /// The guard could not be compiled (strict mode): every call is refused with this
    /// reason at once, without compiling it again.
    Failed(String),
}

/// The document, the drift mode its checks run in, and what is known of each action's guard.
pub(crate) struct OpenApiGuards {
    document: Arc<OpenApi>,
    mode: DriftMode,
    guards: Mutex<HashMap<String, CachedGuard>>,
    /// How many times an operation's guard was compiled on a call (not in `build()`).
    #[cfg(test)]
    compiled_on_call: std::sync::atomic::AtomicUsize,
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
                    guards.insert(action.clone(), CachedGuard::Checked(Arc::new(guard)));
                }
                Err(OpenApiError::NoOperation(_)) if mode != DriftMode::Strict => {
                    guards.insert(action.clone(), CachedGuard::Unchecked);
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
            #[cfg(test)]
            compiled_on_call: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// The drift mode of the checks.
    pub(crate) fn mode(&self) -> DriftMode {
        self.mode
    }

    /// The guard of `action` (compiled now if `build()` did not), or `None` when the action is
    /// sent unchecked. An operation is compiled at most once: a guard that failed to compile
    /// is remembered with its reason, so a broken operation fails fast on every later call.
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
        // A poisoned map holds only finished entries: a panic cannot leave one half-built.
        let mut guards = self.guards.lock().unwrap_or_else(PoisonError::into_inner);
        let cached = match guards.get(action) {
            Some(cached) => cached.clone(),
            None => {
                let cached = self.compile_one(target);
                guards.insert(action.to_owned(), cached.clone());
                cached
            }
        };
        drop(guards);
        match cached {
            CachedGuard::Checked(guard) => Ok(Some(guard)),
            CachedGuard::Unchecked => Ok(None),
            CachedGuard::Failed(reason) => Err(Refusal::new(RefusalCode::InvalidRequest, reason)),
        }
    }

    /// Compiles the guard of one action's route, on its first call.
    fn compile_one(&self, target: &HttpTarget) -> CachedGuard {
        #[cfg(test)]
        self.compiled_on_call
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let selector = OperationSelector::route(target.method.as_str(), target.path.as_ref());
        match self.document.operation(&selector) {
            Ok(guard) => CachedGuard::Checked(Arc::new(guard)),
            Err(_) if self.mode != DriftMode::Strict => CachedGuard::Unchecked,
            Err(OpenApiError::NoOperation(_)) => CachedGuard::Failed(format!(
                "the upstream's OpenAPI document has no operation {} {}",
                target.method.as_str(),
                target.path
            )),
            Err(e) => CachedGuard::Failed(format!(
                "the upstream's OpenAPI operation {} {} cannot be checked: {e}",
                target.method.as_str(),
                target.path
            )),
        }
    }

    /// Checks the planned request against the attached OpenAPI operation (before consent).
    pub(crate) fn check_request(
        &self,
        spec: &ActionSpec,
        target: &HttpTarget,
        plan: &RequestPlan,
        idempotency_header: &HeaderName,
    ) -> Result<(), Refusal> {
        let Some(guard) = self.guard(spec.name.as_ref(), target)? else {
            return Ok(());
        };
        // Headers the channel attaches at dispatch count as present: the idempotency key
        // (a placeholder of the same shape) and the credential.
        let mut headers: Vec<(String, String)> = plan
            .headers
            .iter()
            .filter_map(|(n, v)| {
                v.to_str()
                    .ok()
                    .map(|v| (n.as_str().to_owned(), v.to_owned()))
            })
            .collect();
        if spec.retry == RetryRule::IdempotencyKey {
            headers.push((
                idempotency_header.as_str().to_owned(),
                "00000000-0000-4000-8000-000000000000".to_owned(),
            ));
        }
        let body: Option<Value> = match plan.body.as_deref() {
            Some(bytes) => Some(serde_json::from_slice(bytes).map_err(|_| {
                Refusal::new(RefusalCode::InvalidRequest, "the request body is not JSON")
            })?),
            None => None,
        };
        let path = plan.path.split('?').next().unwrap_or(&plan.path);
        let mut request = OutgoingRequest::new(plan.method.as_str(), path)
            .with_query(&plan.query)
            .with_headers(&headers);
        if let Some(body) = &body {
            request = request.with_body(body);
        }
        let decision = guard.check(self.mode(), &request);
        if decision.allowed {
            Ok(())
        } else {
            Err(Refusal::new(
                RefusalCode::InvalidRequest,
                format!(
                    "the request does not match the upstream's API: {}",
                    decision.detail
                ),
            )
            .with_divergences(decision.divergences))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use sallyport_core::target::HttpMethod;

    use super::*;

    /// A document whose `POST /loops` body schema refers back to itself through `allOf` (its
    /// guard can never compile) and whose `GET /fine` is ordinary.
    fn document() -> Arc<OpenApi> {
        let doc = serde_json::json!({
            "openapi": "3.1.0",
            "info": {"title": "t", "version": "1"},
            "paths": {
                "/loops": {"post": {
                    "operationId": "loop",
                    "requestBody": {"content": {"application/json": {"schema":
                        {"$ref": "#/components/schemas/Loop"}}}},
                    "responses": {"200": {"description": "ok"}}
                }},
                "/fine": {"get": {"operationId": "fine", "responses": {"200": {"description": "ok"}}}}
            },
            "components": {"schemas": {"Loop": {"allOf": [{"$ref": "#/components/schemas/Loop"}]}}}
        });
        Arc::new(OpenApi::from_value(doc).expect("document"))
    }

    #[test]
    fn a_guard_that_failed_to_compile_is_refused_from_the_cache_with_its_reason() {
        let guards = OpenApiGuards::compile(document(), DriftMode::Strict, &[]).expect("guards");
        let target = HttpTarget::new(HttpMethod::Post, "/loops");
        let first = guards.guard("loop_action", &target).expect_err("refused");
        assert_eq!(first.code, RefusalCode::InvalidRequest);
        assert!(
            first
                .reason
                .starts_with("the upstream's OpenAPI operation POST /loops cannot be checked: "),
            "{}",
            first.reason
        );
        assert!(
            first.reason.contains("refers back to itself"),
            "{}",
            first.reason
        );
        for _ in 0..3 {
            let again = guards.guard("loop_action", &target).expect_err("refused");
            assert_eq!(again, first);
        }
        assert_eq!(guards.compiled_on_call.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_missing_operation_is_compiled_once_and_a_good_guard_is_reused() {
        let guards = OpenApiGuards::compile(document(), DriftMode::Strict, &[]).expect("guards");
        let missing = HttpTarget::new(HttpMethod::Delete, "/nowhere");
        for _ in 0..2 {
            let refusal = guards.guard("gone", &missing).expect_err("refused");
            assert_eq!(
                refusal.reason,
                "the upstream's OpenAPI document has no operation DELETE /nowhere"
            );
        }
        let fine = HttpTarget::new(HttpMethod::Get, "/fine");
        let a = guards.guard("fine", &fine).expect("ok").expect("a guard");
        let b = guards.guard("fine", &fine).expect("ok").expect("a guard");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.operation_id(), Some("fine"));
        assert_eq!(guards.compiled_on_call.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn outside_strict_mode_a_broken_guard_is_cached_as_unchecked() {
        let guards = OpenApiGuards::compile(document(), DriftMode::Warn, &[]).expect("guards");
        let target = HttpTarget::new(HttpMethod::Post, "/loops");
        assert!(
            guards
                .guard("loop_action", &target)
                .expect("sent")
                .is_none()
        );
        assert!(
            guards
                .guard("loop_action", &target)
                .expect("sent")
                .is_none()
        );
        assert_eq!(guards.compiled_on_call.load(Ordering::Relaxed), 1);
    }
}
