//! One executor process writing to a journal file, for the tests that start several of them
//! at once on one path (`CARGO_BIN_EXE_journal-writer`).
//!
//! `journal-writer JOURNAL CALLS START_AT_MS [--observe-once] [SIGNING_KEY_FILE]` waits until
//! the Unix time `START_AT_MS` (so processes spawned one after another open the journal
//! together), opens the journal, and makes `CALLS` calls, alternating a read and a mutating
//! call, through an executor with a channel that completes every call and approving consent. With
//! `--observe-once` each read is instead journaled the way an observe call commits: its
//! closed attempt and its record in one `append_with_intent`.
//!
//! Exit codes: 0 every call completed; 2 bad arguments; 3 the journal did not open (the error
//! is printed); 4 a call did not complete (its result is printed).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use sallyport_kernel::channel::{
    CallView, Channel, ChannelOutcome, DescribedRequest, Dispatch, PreparedRequest,
};
use sallyport_kernel::consent::{ConsentDecision, FnConsent};
use sallyport_kernel::journal::{AuditEvent, HeadSigningKey, Intent, Journal};
use sallyport_kernel::outcome::{Refusal, Status};
use sallyport_kernel::target::Target;
use sallyport_kernel::{Action, ActionSpec, Catalog, EffectClass, Executor, Session};
use sallyport_sqlite::SqliteJournal;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

// The actions are written out by hand: `#[derive(Action)]` expands to paths in
// `sallyport-core`, which depends on this crate.

/// Read one item.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code, reason = "the executor decodes it; nothing reads the field")]
struct GetItem {
    id: String,
}

impl Action for GetItem {
    const NAME: &'static str = "get_item";
    type Output = serde_json::Value;

    fn spec() -> ActionSpec {
        ActionSpec::new("get_item", EffectClass::Observe)
            .with_description("Read one item.")
            .with_target(Target::custom("test", json!({})))
    }
}

/// Pay one invoice.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code, reason = "the executor decodes it; nothing reads the field")]
struct PayInvoice {
    invoice_id: String,
}

impl Action for PayInvoice {
    const NAME: &'static str = "pay_invoice";
    type Output = serde_json::Value;

    fn spec() -> ActionSpec {
        ActionSpec::new("pay_invoice", EffectClass::ExternalCommitment)
            .with_description("Pay one invoice.")
            .with_target(Target::custom("test", json!({})))
    }
}

/// A channel named `test` that completes every call at once, echoing the arguments as data.
struct EchoChannel;

#[async_trait]
impl Channel for EchoChannel {
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
        ChannelOutcome::completed(
            call.prepared::<DescribedRequest>()
                .map(|r| r.arguments().clone())
                .unwrap_or_default(),
        )
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), Some(Ok(calls)), Some(Ok(start_at))) = (
        args.first(),
        args.get(1).map(|n| n.parse::<usize>()),
        args.get(2).map(|t| t.parse::<u64>()),
    ) else {
        eprintln!(
            "usage: journal-writer JOURNAL CALLS START_AT_MS [--observe-once] [SIGNING_KEY_FILE]"
        );
        return ExitCode::from(2);
    };
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    std::thread::sleep(Duration::from_millis(start_at.saturating_sub(now_ms)));

    let observe_once = args.get(3).is_some_and(|a| a == "--observe-once");
    let key_file = args.get(if observe_once { 4 } else { 3 });
    let mut builder = SqliteJournal::builder(path);
    if let Some(key_file) = key_file {
        match HeadSigningKey::read_file(key_file) {
            Ok(key) => builder = builder.signing_key(key),
            Err(e) => {
                eprintln!("signing key: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let journal = match builder.open() {
        Ok(journal) => Arc::new(journal),
        Err(e) => {
            eprintln!("open failed: {e:?}");
            return ExitCode::from(3);
        }
    };
    let catalog = match Catalog::builder()
        .action::<GetItem>()
        .action::<PayInvoice>()
        .build()
    {
        Ok(catalog) => catalog,
        Err(e) => {
            eprintln!("catalog: {e}");
            return ExitCode::from(2);
        }
    };
    let executor = match Executor::builder(catalog)
        .journal_arc(journal.clone())
        .channel(EchoChannel)
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .build()
    {
        Ok(executor) => executor,
        Err(e) => {
            eprintln!("executor: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let session = Session::new(format!("writer-{}", std::process::id()));
    runtime.block_on(async {
        for i in 0..calls {
            if observe_once && i % 2 == 0 {
                let intent = Intent::for_bench(false);
                let event = AuditEvent::for_bench(&intent);
                if let Err(e) = journal.append_with_intent(intent, event).await {
                    eprintln!("observe record {i} not written: {e:?}");
                    return ExitCode::from(4);
                }
                continue;
            }
            let (action, arguments) = if i % 2 == 0 {
                ("get_item", json!({"id": format!("item_{i}")}))
            } else {
                ("pay_invoice", json!({"invoice_id": format!("inv_{i}")}))
            };
            let result = executor.call(action, arguments, &session).await;
            if result.status != Status::Completed {
                eprintln!("call {i} did not complete: {result:?}");
                return ExitCode::from(4);
            }
        }
        ExitCode::SUCCESS
    })
}
