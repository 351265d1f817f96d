//! A call parked for a human's approval as an MCP task (the Tasks extension, SEP-2663), for
//! clients on 2026-07-28 or later that declared `io.modelcontextprotocol/tasks`.
//!
//! The call is parked exactly as for any other client (the executor stores the approval and
//! audits it); only the answer differs: instead of a `pending` result naming
//! `check_approval`, the client gets a task and polls `tasks/get`. The task follows the
//! approval in the executor's approval store, whoever decides it (CLI, console, webhook,
//! another process):
//!
//! | approval | task |
//! |---|---|
//! | awaiting a decision | `working`, with a status message naming the approval and its expiry |
//! | approved | `working` while this executor carries the call out (once; see [`Executor::resume_approval`]) |
//! | finished, denied, expired | `completed`, its result the tool result `check_approval` gives (`isError` for `rejected` and `unknown`) |
//! | task cancelled (`tasks/cancel`) while awaiting | the request is withdrawn (denied, see [`withdraw`]): `cancelled` |
//!
//! **Why `working`, not `input_required`.** In SEP-2663 `input_required` means the server
//! needs something *from this client* and lists it in `inputRequests`, which the client
//! answers with `tasks/update`. An approval is decided by a human elsewhere, never by the
//! client (the agent cannot approve its own call), so there is nothing for the client to
//! supply: the task is `working` and says in `statusMessage` what it waits for.
//!
//! **Why `completed` for a denial or an expiry.** SEP-2663 keeps `failed` for a JSON-RPC
//! error of the request; a tool call that ran and ended `isError` is `completed`. A denied or
//! expired approval is a tool result (`rejected`, `consent_denied` or `approval_expired`; an
//! expiry is never reported as a denial), exactly what `check_approval` answers.

use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, Task};
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use sallyport_core::approval::{ApprovalId, ApprovalState, Decided, Decider, Verdict};
use sallyport_core::{Executor, Session};
use serde_json::json;

use crate::render::tool_result;

/// How often a waiting task reads its approval from the store at first, and at most. The
/// approval store has no change notification a front end can wait on, so this is a short
/// poll (one read of one approval) that backs off from the first to the second while nothing
/// changes: a decision shows in `tasks/get` within half a second plus the client's own
/// interval, and a thousand waiting tasks read the store 2,000 times a second at most.
const STORE_POLL: (Duration, Duration) = (Duration::from_millis(50), Duration::from_millis(500));

/// The poll interval the task suggests to the client.
const CLIENT_POLL_MS: u64 = 500;

/// How long a task outlives its approval's expiry: time for an approved call to be carried
/// out and for the client to read the final state.
const TTL_GRACE_MS: u64 = 10 * 60 * 1000;

/// The `_meta` key of a task's approval id (on the `CreateTaskResult`).
pub const APPROVAL_META: &str = "io.sallyport/approval_id";

/// The decider recorded when a client cancels the task of a call still awaiting approval.
const WITHDRAW_CHANNEL: &str = "mcp_task_cancel";

/// Starts a task following approval `id` of a call `session` made, and returns its seed
/// state. The task is readable through `tasks` before this returns.
pub(crate) async fn follow(
    tasks: &TaskManager,
    executor: &Executor,
    session: &Session,
    id: &ApprovalId,
) -> Task {
    let now_ms = now_ms();
    let approval = match executor.approval_store() {
        Some(store) => store.approval(id).await.ok().flatten(),
        None => None,
    };
    let mut options = TaskOptions::new()
        .with_poll_interval_ms(CLIENT_POLL_MS)
        .with_status_message(waiting_message(id, approval.as_ref()));
    // A task outlives its approval's expiry; an approval that never expires makes a task
    // kept as long as the connection.
    options = match &approval {
        Some(a) if a.expires_at_ms == sallyport_core::approval::NEVER_EXPIRES => {
            options.with_ttl_ms(None)
        }
        Some(a) => options.with_ttl_ms(
            a.expires_at_ms
                .saturating_sub(now_ms)
                .saturating_add(TTL_GRACE_MS),
        ),
        None => options,
    };
    let executor = executor.clone();
    let session = session.clone();
    let id = id.clone();
    tasks.spawn(options, move |ctx| {
        Box::pin(async move { run(&executor, &session, &id, &ctx).await })
    })
}

/// The task's work: wait until the approval ends (carrying it out here once approved), then
/// answer what `check_approval` answers.
async fn run(
    executor: &Executor,
    session: &Session,
    id: &ApprovalId,
    ctx: &TaskContext,
) -> Result<CallToolResult, TaskExit> {
    let Some(store) = executor.approval_store() else {
        return Err(TaskExit::Error(McpError::internal_error(
            "the executor has no approval store",
            None,
        )));
    };
    let mut withdrawn = false;
    let mut said = Said::default();
    let mut pause = STORE_POLL.0;
    let mut last_state = None;
    loop {
        match store.approval(id).await {
            Ok(Some(approval)) => {
                let now = now_ms();
                if last_state != Some(approval.state) {
                    last_state = Some(approval.state);
                    pause = STORE_POLL.0;
                }
                match approval.state {
                    ApprovalState::Awaiting if !approval.is_expired_at(now) => {
                        said.say(ctx, waiting_message(id, Some(&approval)));
                    }
                    ApprovalState::Approved => {
                        said.say(ctx, carrying_out(id));
                        // Carries it out if no other executor has claimed it; the next read
                        // sees what came of it (at once when it ran here).
                        match executor.resume_approval(id).await {
                            Ok(Some(_)) => continue,
                            Ok(None) => {}
                            Err(e) => {
                                tracing::warn!(approval = %id, error = %e, "approved call not carried out by this task; still following it");
                            }
                        }
                    }
                    ApprovalState::Executing
                        if approval.claim.as_ref().is_some_and(|c| c.until_ms > now) =>
                    {
                        said.say(ctx, carrying_out(id));
                    }
                    // Finished, denied, expired (recorded, or due and recorded by the check
                    // below), or an execution whose claim lapsed (`unknown`).
                    _ => break,
                }
            }
            // Gone from the store: `check_approval` says so (`approval_not_found`).
            Ok(None) => break,
            // The approval is the executor's record; one that cannot be read now is read
            // again, never reported as decided.
            Err(_) => said.say(
                ctx,
                format!("the approval store cannot be read now; still waiting for approval {id}"),
            ),
        }
        let wait = pause;
        pause = (pause * 2).min(STORE_POLL.1);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = ctx.cancelled(), if !withdrawn => {
                withdrawn = true;
                if withdraw(executor, session, id).await {
                    return Err(TaskExit::Cancelled);
                }
                // Decided first: the task follows the call to its real end.
            }
        }
    }
    let arguments = json!({ "approval_id": id }).to_string();
    let result = executor
        .call_json(
            sallyport_core::approval::CHECK_APPROVAL,
            &arguments,
            session,
        )
        .await;
    tool_result(&result).map_err(TaskExit::Error)
}

/// `tasks/cancel` on a call still awaiting approval withdraws the request: the approval is
/// denied, recorded as decided by the session through `mcp_task_cancel`, so no approver can
/// later send a call its agent gave up on. Returns whether the withdrawal landed; when a
/// human decided first, nothing changes and the task follows the call to its end (SEP-2663
/// lets a cancelled task reach another terminal status).
async fn withdraw(executor: &Executor, session: &Session, id: &ApprovalId) -> bool {
    let Some(store) = executor.approval_store() else {
        return false;
    };
    let decider = Decider::new(session.id().as_str(), WITHDRAW_CHANNEL);
    match sallyport_core::approval::decide(
        store.as_ref(),
        id,
        Verdict::Deny,
        &decider,
        Some("the agent cancelled the MCP task"),
    )
    .await
    {
        Ok(Decided::Recorded(approval)) => approval.state == ApprovalState::Denied,
        Ok(_) => false,
        Err(e) => {
            tracing::warn!(approval = %id, error = %e, "cancelled task could not withdraw its approval");
            false
        }
    }
}

/// The task's status message as last set: it (and the task's `lastUpdatedAt`) changes only
/// when what the task waits for does.
#[derive(Default)]
struct Said(String);

impl Said {
    fn say(&mut self, ctx: &TaskContext, message: String) {
        if self.0 != message {
            ctx.set_status_message(message.clone());
            self.0 = message;
        }
    }
}

fn carrying_out(id: &ApprovalId) -> String {
    format!("approval {id} was approved; the call is being carried out")
}

fn waiting_message(
    id: &ApprovalId,
    approval: Option<&sallyport_core::approval::Approval>,
) -> String {
    match approval {
        Some(a) => format!(
            "waiting for a human to approve or deny this call (approval {id}) until {}; nothing was sent yet",
            a.expires_at()
        ),
        None => format!(
            "waiting for a human to approve or deny this call (approval {id}); nothing was sent yet"
        ),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
