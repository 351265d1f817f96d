//! An HMAC-signed webhook receiver for sallyport approvals, and signed notifications of
//! parked calls ([`notify`]: a [`Notifier`] posts each parked call with a link to decide).
//!
//! A call parked for approval (deferred consent, see [`sallyport_core::approval`]) can be
//! decided by a chat-ops bot or a ticketing system: it posts the human's decision to a URL
//! the host serves, signed with a secret the two share. [`WebhookReceiver::router`] is that
//! URL as an axum [`Router`](axum::Router) the host mounts next to its own routes.
//!
//! ```no_run
//! use sallyport_webhook::WebhookReceiver;
//! # async fn demo(executor: sallyport_core::Executor) -> Result<(), Box<dyn std::error::Error>> {
//! // `executor` was built with a vault holding the credential `approvals-webhook`, whose
//! // value is the secret shared with the bot.
//! let receiver = WebhookReceiver::builder(executor)
//!     .secret_credential("approvals-webhook")
//!     .build()?;
//! let app = axum::Router::new().merge(receiver.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! The secret is an ordinary vault credential (any kind; only its value is used, and the
//! binding is never consulted), for instance:
//!
//! ```text
//! printf '%s' "$WEBHOOK_SECRET" | sallyport vault set approvals-webhook --kind bearer --bind https://chatops.example.com
//! ```
//!
//! # Wire format (for bot authors)
//!
//! `POST /approvals/decision` (the path is the host's choice), `Content-Type:
//! application/json`, a body of at most 16 KiB (the host may change the limit):
//!
//! ```json
//! {"approval_id": "apr_0193…", "decision": "approve", "decided_by": "alice@example.com", "reason": "ticket OPS-812"}
//! ```
//!
//! `decision` is `"approve"` or `"deny"`; `decided_by` names the human (it is recorded in the
//! audit chain, cut to 128 characters); `reason` is optional (shown to the agent when the call
//! is denied, cut to 500 characters). Optional `approver_name` (a display name) and
//! `approver_groups` (a list, for the executor's decision policy) describe the approver; the
//! decision also records the name of the secret credential that authenticated it as its key
//! id. No other fields are accepted.
//!
//! The request carries one header:
//!
//! ```text
//! Sallyport-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body bytes>")>
//! ```
//!
//! `t` is the time of sending in whole Unix seconds; the signed string is `t` in decimal, a
//! full stop, and the body's exact bytes as sent (sign the bytes you send, not a
//! re-serialization); `v1` is the 32-byte MAC as 64 hex digits (either case). The secret is
//! the credential's value in the vault, as UTF-8 bytes, at least 16 bytes long. [`sign`]
//! computes the header value. In a shell:
//!
//! ```text
//! t=$(date +%s); body='{"approval_id":"apr_…","decision":"approve","decided_by":"alice"}'
//! v1=$(printf '%s.%s' "$t" "$body" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)
//! curl -sS https://host/approvals/decision -H "Sallyport-Signature: t=$t,v1=$v1" \
//!      -H 'Content-Type: application/json' -d "$body"
//! ```
//!
//! ## Answers
//!
//! Checks run in this order; the first that fails answers `{"error": code, "reason": text}`
//! ([`RefusalCode`]), and a refused delivery decides nothing and appends nothing to the
//! journal:
//!
//! | status | `error` | when |
//! |---|---|---|
//! | 413 | `body_too_large` | the body is longer than the limit |
//! | 400 | `missing_signature`, `malformed_signature` | no header, or not `t=…,v1=…` |
//! | 401 | `stale_timestamp` | `t` is more than the replay window (default 300 s) from the receiver's clock, in either direction |
//! | 503 | `vault_locked`, `secret_unavailable` | the secret cannot be read from the vault now |
//! | 401 | `bad_signature` | `v1` is not the MAC of this `t` and body (compared in constant time) |
//! | 409 | `replayed` | this `(t, v1)` was already accepted within the window |
//! | 400 | `invalid_body` | the body is not JSON of the shape above |
//! | 404 | `unknown_approval` | no approval has that id |
//! | 403 | `decision_refused` | the approver requested the call (separation of duties) or the executor's decision policy gives it no authority; the refusal is audited |
//! | 503 | `journal_unavailable` | the approval store cannot be used |
//!
//! A delivery that passes every check is decided through the library's one compare-and-set
//! ([`sallyport_core::approval::decide_under`], with the executor's decision policy); an approval this decision approved is then
//! carried out by the executor ([`Executor::resume_approval`](sallyport_core::Executor::resume_approval))
//! before the answer is sent:
//!
//! ```json
//! {"approval_id": "apr_0193…", "state": "finished", "recorded": true}
//! ```
//!
//! With a quorum (`ExecutorBuilder::approvals_required_for`) the answer adds `approvals` (the
//! distinct approvals counted) and `required`; an approval that is not the last one needed
//! leaves `state` `awaiting`.
//!
//! `recorded` is `false` when the approval was already decided (by someone else, or by an
//! earlier delivery with another signature), had expired, or had run: `state` then says where
//! it stands ([`ApprovalState`](sallyport_core::approval::ApprovalState)). A 5xx answer
//! means nothing was decided: the same delivery may be sent again while its `t` is within
//! the window. Every answer carries `Cache-Control: no-store`; none repeats the secret or
//! the signature.
//!
//! The replay guard lives in the receiver's memory, so a delivery replayed to another
//! process (or after a restart) passes it; it then meets the approval's compare-and-set,
//! which records no second decision (`recorded: false`) and sends nothing.

mod handler;
pub mod notify;
mod receiver;
mod refusal;
mod replay;
mod signature;

pub use self::notify::{Notifier, NotifierBuilder, NotifierError};
pub use self::receiver::{
    BuildError, DEFAULT_MAX_BODY_BYTES, DEFAULT_PATH, DEFAULT_REPLAY_CAPACITY,
    DEFAULT_REPLAY_WINDOW, MIN_SECRET_BYTES, WebhookReceiver, WebhookReceiverBuilder,
};
pub use self::refusal::RefusalCode;
pub use self::signature::{SIGNATURE_HEADER, sign};
