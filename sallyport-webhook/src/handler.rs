//! One delivery, checked in order; the first failed check answers and nothing is decided.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use sallyport_core::approval::{
    self, ApprovalError, ApprovalId, ApprovalState, Decided, Decider, DecisionRefusal, Verdict,
};
use sallyport_core::vault::{VaultError, VaultState};
use serde::Deserialize;

use crate::receiver::{MIN_SECRET_BYTES, Shared};
use crate::refusal::{RefusalCode, Refused};
use crate::replay::Admission;
use crate::signature::{SIGNATURE_HEADER, SignatureHeader};

/// The front end named in every decision's record.
const CHANNEL: &str = "webhook";

/// Longest approval id accepted (ids the executor makes are 36 characters).
const MAX_ID: usize = 128;

/// The body of a delivery.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    approval_id: String,
    decision: Verdict,
    decided_by: String,
    /// The approver's display name, recorded beside `decided_by`.
    #[serde(default)]
    approver_name: Option<String>,
    /// The approver's groups, for the decision policy.
    #[serde(default)]
    approver_groups: Vec<String>,
    #[serde(default)]
    reason: Option<String>,
}

/// The `POST` handler: body size, header, timestamp, secret, signature, replay, body shape,
/// then the decision.
pub(crate) async fn handle(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match check_and_decide(&shared, &headers, body).await {
        Ok(response) => response,
        Err(refused) => {
            tracing::info!(code = refused.code.as_str(), "webhook delivery refused");
            refused.into_response()
        }
    }
}

async fn check_and_decide(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Refused> {
    let body = body.map_err(|rejection| match rejection {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            Refused::new(
                RefusalCode::BodyTooLarge,
                "the body is longer than this receiver accepts",
            )
        }
        _ => Refused::new(RefusalCode::InvalidBody, "the body could not be read"),
    })?;

    let header = signature_header(headers)?;

    let now = sallyport_core::clock::now_ms() / 1000;
    if header.t.abs_diff(now) > shared.window_secs {
        return Err(Refused::new(
            RefusalCode::StaleTimestamp,
            "the signed timestamp is outside the replay window of this server's clock; sign each delivery when it is sent",
        ));
    }

    if !signature_holds(shared, &header, &body).await? {
        return Err(Refused::new(
            RefusalCode::BadSignature,
            "the signature does not match this timestamp and body under the shared secret",
        ));
    }

    match shared.replay.admit(header.t, header.v1, now) {
        Admission::Fresh => {}
        Admission::Replayed => {
            return Err(Refused::new(
                RefusalCode::Replayed,
                "this delivery was already accepted; a new decision needs a new timestamp and signature",
            ));
        }
        Admission::Stale => {
            return Err(Refused::new(
                RefusalCode::StaleTimestamp,
                "the signed timestamp left the replay window while the delivery was checked; sign each delivery when it is sent",
            ));
        }
        Admission::Full => {
            return Err(Refused::new(
                RefusalCode::TooManyDeliveries,
                "too many deliveries within one replay window; retry later",
            ));
        }
    }

    let decided = match parse_and_decide(shared, &body).await {
        Ok(decided) => decided,
        Err(refused) => {
            if refused.code.status().is_server_error() {
                // Nothing was decided because of this side: the sender's retry of the same
                // delivery must be heard.
                shared.replay.forget(header.t, header.v1);
            }
            return Err(refused);
        }
    };
    Ok(Json(decided).into_response())
}

/// The one `Sallyport-Signature` header, parsed.
fn signature_header(headers: &HeaderMap) -> Result<SignatureHeader, Refused> {
    let mut values = headers.get_all(SIGNATURE_HEADER).iter();
    let Some(value) = values.next() else {
        return Err(Refused::new(
            RefusalCode::MissingSignature,
            "there is no Sallyport-Signature header",
        ));
    };
    if values.next().is_some() {
        return Err(Refused::new(
            RefusalCode::MalformedSignature,
            "there is more than one Sallyport-Signature header",
        ));
    }
    let value = value.to_str().map_err(|_| {
        Refused::new(
            RefusalCode::MalformedSignature,
            "the Sallyport-Signature header is not ASCII",
        )
    })?;
    SignatureHeader::parse(value)
        .map_err(|reason| Refused::new(RefusalCode::MalformedSignature, reason))
}

/// Resolves the shared secret from the vault now (so a rotation or a lock applies at once)
/// and checks the signature against it in constant time.
async fn signature_holds(
    shared: &Shared,
    header: &SignatureHeader,
    body: &[u8],
) -> Result<bool, Refused> {
    let locked = || {
        Refused::new(
            RefusalCode::VaultLocked,
            "the vault is locked, so the shared secret cannot be read; nothing was decided",
        )
    };
    if shared.vault.state() == VaultState::Locked {
        return Err(locked());
    }
    let credential = match shared.vault.resolve(&shared.credential).await {
        Ok(credential) => credential,
        Err(VaultError::Locked) => return Err(locked()),
        Err(error) => {
            tracing::warn!(
                credential = %shared.credential,
                error = %error,
                "the webhook's shared secret cannot be resolved"
            );
            return Err(Refused::new(
                RefusalCode::SecretUnavailable,
                "the webhook's shared secret is not available in the vault; nothing was decided",
            ));
        }
    };
    let secret = credential.secret().expose().as_bytes();
    if secret.len() < MIN_SECRET_BYTES {
        tracing::warn!(
            credential = %shared.credential,
            "the webhook's shared secret is shorter than 16 bytes; every delivery is refused"
        );
        return Err(Refused::new(
            RefusalCode::SecretUnavailable,
            "the webhook's shared secret is too short to authenticate anything; nothing was decided",
        ));
    }
    Ok(header.verifies(secret, body))
}

/// What a decided delivery answers.
#[derive(serde::Serialize)]
struct DecidedBody {
    approval_id: String,
    state: ApprovalState,
    recorded: bool,
    /// With a quorum: the distinct approvals counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    approvals: Option<u32>,
    /// With a quorum: how many the call needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    required: Option<u32>,
}

/// Parses the body and decides.
async fn parse_and_decide(shared: &Arc<Shared>, body: &[u8]) -> Result<DecidedBody, Refused> {
    let body: DecisionBody = serde_json::from_slice(body).map_err(|e| {
        Refused::new(
            RefusalCode::InvalidBody,
            if e.is_data() {
                r#"the body is {"approval_id": "...", "decision": "approve"|"deny", "decided_by": "...", "approver_name": "...", "approver_groups": ["..."], "reason": "..."} (approver_name, approver_groups and reason optional, no other fields)"#
            } else {
                "the body is not a JSON object"
            },
        )
    })?;
    // The approver the caller names, and the key (the shared secret's credential) that
    // authenticated the delivery.
    let mut decider = Decider::new(body.decided_by, CHANNEL)
        .with_groups(body.approver_groups)
        .with_key_id(shared.credential.as_str());
    if let Some(name) = body.approver_name {
        decider = decider.with_name(name);
    }
    if decider.by.is_empty() {
        return Err(Refused::new(
            RefusalCode::InvalidBody,
            "`decided_by` names who decided",
        ));
    }
    if body.approval_id.is_empty()
        || body.approval_id.len() > MAX_ID
        || !body.approval_id.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(Refused::new(
            RefusalCode::UnknownApproval,
            "no approval has that id",
        ));
    }
    let id = ApprovalId::from_stored(body.approval_id);

    // The decision and the execution it may start run on their own task: a sender that
    // hangs up must not cancel a call between its intent and its send.
    let executor = shared.executor.clone();
    let task_id = id.clone();
    let task = tokio::spawn(async move {
        decide_and_resume(&executor, &task_id, body.decision, &decider, body.reason).await
    });
    let decided = match task.await {
        Ok(result) => result,
        Err(error) => {
            tracing::error!(approval_id = %id, error = %error, "the webhook's decision task failed");
            return Err(Refused::new(
                RefusalCode::InternalError,
                "the decision failed unexpectedly; check the approval's state before retrying",
            ));
        }
    };
    match decided {
        Ok(Outcome::Refused(refusal)) => Err(Refused::new(
            RefusalCode::DecisionRefused,
            match refusal {
                DecisionRefusal::SelfApproval => {
                    "the approver named requested this call and cannot approve it (separation of duties); the refusal is audited and nothing was decided"
                }
                _ => {
                    "the decision policy gives the approver named no authority over this approval; the refusal is audited and nothing was decided"
                }
            },
        )),
        Ok(Outcome::Decided {
            recorded,
            state,
            counted,
        }) => Ok(DecidedBody {
            approval_id: id.as_str().to_owned(),
            state,
            recorded,
            approvals: counted.map(|c| c.0),
            required: counted.map(|c| c.1),
        }),
        Err(ApprovalError::NotFound(_)) => Err(Refused::new(
            RefusalCode::UnknownApproval,
            "no approval has that id",
        )),
        Err(error) => {
            tracing::warn!(approval_id = %id, error = %error, "the approval store cannot be used");
            Err(Refused::new(
                RefusalCode::JournalUnavailable,
                "the approval store cannot be used; nothing was decided",
            ))
        }
    }
}

/// What [`decide_and_resume`] came to.
enum Outcome {
    /// The decision was refused (audited); nothing changed.
    Refused(DecisionRefusal),
    /// Whether this delivery's decision was recorded, the state after, and with a quorum
    /// the approvals counted and required.
    Decided {
        recorded: bool,
        state: ApprovalState,
        counted: Option<(u32, u32)>,
    },
}

/// [`sallyport_core::Executor::decide`], in its two steps, so the answer stays truthful when
/// the execution fails after the decision was recorded: the decision stands (it is in the
/// journal), the call stays `approved`, and [`sallyport_core::Executor::resume_approvals`]
/// picks it up. Decides under the executor's decision policy.
async fn decide_and_resume(
    executor: &sallyport_core::Executor,
    id: &ApprovalId,
    verdict: Verdict,
    decider: &Decider,
    reason: Option<String>,
) -> Result<Outcome, ApprovalError> {
    let store =
        executor
            .approval_store()
            .ok_or(sallyport_core::journal::JournalError::Unsupported(
                "approvals",
            ))?;
    let policy = executor.decision_policy().map(AsRef::as_ref);
    let decided = approval::decide_under(
        store.as_ref(),
        policy,
        id,
        verdict,
        decider,
        reason.as_deref(),
    )
    .await?;
    if let Decided::Refused { refusal, .. } = &decided {
        tracing::info!(approval_id = %id, by = %decider.by, refusal = %refusal, "webhook decision refused");
        return Ok(Outcome::Refused(*refusal));
    }
    let recorded = matches!(decided, Decided::Recorded(_));
    let quorum = decided.approval().required_approvals;
    let counted = (quorum > 1).then(|| (decided.approval().approval_count(), quorum));
    let mut state = decided.approval().state;
    tracing::info!(approval_id = %id, by = %decider.by, recorded, state = %state, "webhook decision");
    if recorded && state == ApprovalState::Approved {
        if let Err(error) = executor.resume_approval(id).await {
            tracing::warn!(
                approval_id = %id,
                error = %error,
                "the approved call could not be carried out now; it stays approved for resume_approvals"
            );
        }
        match store.approval(id).await {
            Ok(Some(now)) => state = now.state,
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(approval_id = %id, error = %error, "cannot read the approval back");
            }
        }
    }
    Ok(Outcome::Decided {
        recorded,
        state,
        counted,
    })
}
