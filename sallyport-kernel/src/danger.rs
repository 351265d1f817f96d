//! Doors that weaken safety. Everything here is named so it stands out in review.

use async_trait::async_trait;

use crate::consent::{ConsentDecision, ConsentProvider, ConsentRequest};

/// Approves every consent request without asking anyone.
///
/// Only for tests and demos whose upstream is fake. Reach it through
/// `ExecutorBuilder::dangerous().auto_approve_consent()`, so the weakening is visible at the
/// call site.
#[derive(Clone, Copy, Debug)]
pub struct AutoApprove {
    _private: (),
}

impl AutoApprove {
    pub(crate) fn new() -> Self {
        Self { _private: () }
    }
}

#[async_trait]
impl ConsentProvider for AutoApprove {
    fn channel(&self) -> &str {
        "auto_approve"
    }

    async fn ask(&self, request: &ConsentRequest) -> ConsentDecision {
        tracing::warn!(action = %request.action, "consent auto-approved (danger door)");
        ConsentDecision::Approve
    }
}
