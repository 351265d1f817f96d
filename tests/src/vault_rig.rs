//! Shared pieces of the vault and CLI tests (`sallyport-vault`'s, `sallyport-cli`'s and the
//! workspace's flows): hand-written actions, a scripted channel that counts what it is asked
//! to send, a counting consent provider and credential helpers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use sallyport_core::channel::{
    CallView, Channel, ChannelOutcome, DescribedRequest, Dispatch, PreparedRequest,
};
use sallyport_core::consent::{ConsentDecision, ConsentProvider, ConsentRequest};
use sallyport_core::outcome::Refusal;
use sallyport_core::target::Target;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, KdfParams};
use sallyport_core::{Action, ActionSpec, EffectClass};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A fast KDF for tests (1 MiB, 1 pass); one test covers the defaults.
pub fn fast_kdf() -> KdfParams {
    KdfParams::new(1024, 1, 1)
}

/// The passphrase the tests use.
pub const PASSPHRASE: &str = "correct horse battery staple";

/// A bearer credential bound to `url`.
pub fn bearer(name: &str, url: &str) -> CredentialMeta {
    CredentialMeta::new(name, CredentialKind::Bearer, Binding::url(url))
}

/// An action with a credential: queue a preview deployment.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeployPreview {
    /// The project.
    pub project: String,
    /// Why.
    pub reason: String,
}

impl Action for DeployPreview {
    const NAME: &'static str = "deploy_preview";
    type Output = serde_json::Value;

    fn spec() -> ActionSpec {
        ActionSpec::new("deploy_preview", EffectClass::ExternalCommitment)
            .with_description("Queue one preview deployment.")
            .with_credential("deploy-api")
            .with_target(Target::custom("test", serde_json::json!({})))
    }

    fn audit_note(&self) -> Option<String> {
        Some(self.reason.clone())
    }
}

/// An action without a credential: read a status.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadStatus {
    /// The project.
    pub project: String,
}

impl Action for ReadStatus {
    const NAME: &'static str = "read_status";
    type Output = serde_json::Value;

    fn spec() -> ActionSpec {
        ActionSpec::new("read_status", EffectClass::Observe)
            .with_description("Read one project's status.")
            .with_target(Target::custom("test", serde_json::json!({})))
    }
}

/// What the scripted channel answers.
pub type Script = dyn Fn(&Dispatch<'_>) -> ChannelOutcome + Send + Sync;

/// A channel named `test` that counts sends and answers from a script. It never logs.
pub struct ScriptedChannel {
    /// How many requests the channel "sent".
    pub sends: Arc<AtomicU32>,
    script: Box<Script>,
}

impl std::fmt::Debug for ScriptedChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedChannel")
            .field("sends", &self.sends)
            .finish_non_exhaustive()
    }
}

impl ScriptedChannel {
    /// A channel that answers every send with `script`'s outcome.
    pub fn new(script: impl Fn(&Dispatch<'_>) -> ChannelOutcome + Send + Sync + 'static) -> Self {
        Self {
            sends: Arc::new(AtomicU32::new(0)),
            script: Box::new(script),
        }
    }
}

#[async_trait]
impl Channel for ScriptedChannel {
    fn name(&self) -> &str {
        "test"
    }

    fn prepare(&self, call: &CallView<'_>) -> Result<Box<dyn PreparedRequest>, Refusal> {
        Ok(Box::new(DescribedRequest::new(
            format!("TEST {}", call.spec.name),
            call.arguments.clone(),
        )))
    }

    async fn dispatch(&self, call: Dispatch<'_>) -> ChannelOutcome {
        match call.context.permit().await {
            Ok(permit) => permit.sending(),
            Err(refused) => return refused,
        }
        self.sends.fetch_add(1, Ordering::SeqCst);
        (self.script)(&call)
    }
}

/// A consent provider that approves and counts how often it was asked.
#[derive(Debug, Clone, Default)]
pub struct CountingConsent {
    /// How often it was asked.
    pub asked: Arc<AtomicU32>,
}

#[async_trait]
impl ConsentProvider for CountingConsent {
    async fn ask(&self, _request: &ConsentRequest) -> ConsentDecision {
        self.asked.fetch_add(1, Ordering::SeqCst);
        ConsentDecision::Approve
    }
}
