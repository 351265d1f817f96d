//! A scripted channel for pipeline tests: counts dispatches, records the order of events, and
//! answers with scripted outcomes. Pipeline tests only — never the proof that a transport works.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::OptionalExtension;
use sallyport_core::channel::{
    CallView, Channel, ChannelOutcome, DescribedRequest, Dispatch, PreparedRequest,
};
use sallyport_core::code::RefusalCode;
use sallyport_core::outcome::Refusal;

/// What the channel does on its next dispatch.
#[derive(Debug, Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "a test script of a few steps; rig-core and cedar-policy turn on serde_json's \
              `preserve_order`, whose maps make `ChannelOutcome` large enough to trip the \
              lint in builds with it"
)]
pub enum Step {
    /// Report this outcome after one send.
    Answer(ChannelOutcome),
    /// Wait forever before sending anything.
    HangBeforeSend,
    /// Send, then wait forever.
    HangAfterSend,
}

/// The intent row as the channel found it in the journal file at dispatch time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenIntent {
    /// `attempts.phase`, or `absent` when the call has no attempt row yet.
    pub phase: String,
    /// `attempts.idempotency_key`.
    pub idempotency_key: String,
    /// The key the channel was handed.
    pub key_handed: String,
}

/// A scripted channel named `test`.
#[derive(Debug, Default)]
pub struct ScriptedChannel {
    dispatches: AtomicU32,
    steps: Mutex<VecDeque<Step>>,
    /// Ordered events: `prepare`, `dispatch`; shared with consent providers and preconditions.
    pub events: Arc<Mutex<Vec<String>>>,
    journal_file: Option<PathBuf>,
    seen: Mutex<Vec<SeenIntent>>,
}

impl ScriptedChannel {
    /// A channel that completes every call, echoing the arguments as data.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also reads the intent row from this journal file at every dispatch.
    #[must_use]
    pub fn reading_journal(mut self, path: impl Into<PathBuf>) -> Self {
        self.journal_file = Some(path.into());
        self
    }

    /// Shares an event log.
    #[must_use]
    pub fn with_events(mut self, events: Arc<Mutex<Vec<String>>>) -> Self {
        self.events = events;
        self
    }

    /// Queues a step.
    pub fn then(&self, step: Step) -> &Self {
        self.steps.lock().expect("steps").push_back(step);
        self
    }

    /// How many requests the channel "sent".
    pub fn dispatches(&self) -> u32 {
        self.dispatches.load(Ordering::SeqCst)
    }

    /// The intent rows seen at dispatch time.
    pub fn seen_intents(&self) -> Vec<SeenIntent> {
        self.seen.lock().expect("seen").clone()
    }

    fn log(&self, event: &str) {
        self.events.lock().expect("events").push(event.to_owned());
    }
}

#[async_trait]
impl Channel for ScriptedChannel {
    fn name(&self) -> &str {
        "test"
    }

    fn prepare(&self, call: &CallView<'_>) -> Result<Box<dyn PreparedRequest>, Refusal> {
        self.log("prepare");
        if call
            .arguments
            .get("path")
            .and_then(|p| p.as_str())
            .is_some_and(|p| p.contains(".."))
        {
            return Err(Refusal::new(
                RefusalCode::InvalidRequest,
                "path would leave its directory",
            ));
        }
        Ok(Box::new(DescribedRequest::new(
            format!("TEST {}", call.spec.name),
            call.arguments.clone(),
        )))
    }

    async fn dispatch(&self, call: Dispatch<'_>) -> ChannelOutcome {
        self.log("dispatch");
        if let Some(path) = &self.journal_file {
            let conn = rusqlite::Connection::open(path).expect("open journal for reading");
            // A state-changing call's intent is durable before dispatch; an observe call
            // commits once, after its response: no row yet (`absent`).
            let (phase, key): (String, String) = conn
                .query_row(
                    "SELECT phase, idempotency_key FROM attempts WHERE attempt_id = ?1",
                    [call.attempt_id.as_str()],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .expect("read the attempts table")
                .unwrap_or_else(|| ("absent".to_owned(), String::new()));
            self.seen.lock().expect("seen").push(SeenIntent {
                phase,
                idempotency_key: key,
                key_handed: call.idempotency_key.as_str().to_owned(),
            });
        }
        let step = self.steps.lock().expect("steps").pop_front();
        match step {
            Some(Step::HangBeforeSend) => std::future::pending().await,
            Some(Step::HangAfterSend) => {
                match call.context.permit().await {
                    Ok(permit) => permit.sending(),
                    Err(refused) => return refused,
                }
                self.dispatches.fetch_add(1, Ordering::SeqCst);
                std::future::pending().await
            }
            Some(Step::Answer(outcome)) => {
                match call.context.permit().await {
                    Ok(permit) => permit.sending(),
                    Err(refused) => return refused,
                }
                self.dispatches.fetch_add(1, Ordering::SeqCst);
                outcome
            }
            None => {
                match call.context.permit().await {
                    Ok(permit) => permit.sending(),
                    Err(refused) => return refused,
                }
                self.dispatches.fetch_add(1, Ordering::SeqCst);
                ChannelOutcome::completed(
                    call.prepared::<DescribedRequest>()
                        .map(|r| r.arguments().clone())
                        .unwrap_or_default(),
                )
            }
        }
    }
}
