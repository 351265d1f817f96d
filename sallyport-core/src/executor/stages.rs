//! The stages, in order. Each takes the previous stage's value and returns the next one or a
//! [`Refusal`]; the values can only be made here, so a stage cannot be skipped.

use std::any::Any;
use std::sync::Arc;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::Inner;
use super::cancel::{CallGuard, scrub_cut, scrub_event};
use crate::action::ConsentRule;
use crate::catalog::Entry;
use crate::channel::{
    CallView, Channel, ChannelOutcome, Dispatch, DispatchContext, ResolvedName, still_ready,
};
use crate::code::{Code, ConsentOutcome, UpstreamCode};
use crate::consent::{ConsentDecision, ConsentDisplay, ConsentRequest, MAX_SHOWN_BYTES};
use crate::drift::{DriftMode, Verdict, canonical_json};
use crate::journal::{IdempotencyKey, Intent, Phase};
use crate::outcome::{ActionResult, Next, Origin, Refusal, RefusalCode, Status};
use crate::scrub::Scrubber;
use crate::session::Session;
use crate::vault::{Credential, VaultError, VaultState};

/// Longest reason the agent is shown.
const MAX_REASON: usize = 500;

/// Longest agent's note kept for the human and the audit record.
const MAX_NOTE: usize = 2_000;

/// The agent's note, scrubbed, and cut only with a visible count of what is not shown: the
/// human must never read a cut note as the whole of it.
fn shown_note(scrubber: &Scrubber, note: &str) -> String {
    let whole = scrubber.scrub(note).len();
    let shown = scrubber.bounded(note, MAX_NOTE);
    if whole <= MAX_NOTE {
        return shown;
    }
    let kept = shown.len().saturating_sub(crate::scrub::CUT.len());
    format!(
        "{shown} ({} more bytes not shown)",
        whole.saturating_sub(kept)
    )
}

/// Stage 1: the action exists.
struct Resolved {
    entry: Arc<Entry>,
}

/// Stages 2–3: the arguments match the schema and decode.
struct Decoded {
    entry: Arc<Entry>,
    arguments: Value,
    canonical: String,
    input: Arc<dyn Any + Send + Sync>,
}

/// Stage 4: every object is in scope and the channel accepts the concrete request.
struct Authorized {
    decoded: Decoded,
    channel: Arc<dyn Channel>,
}

/// Stages 5–7: the definition is approved, the credential is ready, preconditions hold.
struct Ready {
    authorized: Authorized,
    credential: Option<Credential>,
}

impl Ready {
    /// The name and version of the credential resolved at stage 6.
    fn resolved(&self) -> Option<ResolvedName> {
        self.credential.as_ref().map(|c| ResolvedName {
            name: c.meta().name.clone(),
            version: c.meta().version,
        })
    }
}

/// Stage 8: a human approved, or the rule needs no one.
struct Consented {
    ready: Ready,
}

/// Stage 9: the intent is durable.
struct Intended {
    consented: Consented,
    idempotency_key: IdempotencyKey,
}

pub(super) async fn run(
    inner: &Inner,
    guard: &mut CallGuard,
    session: &Session,
    arguments: Value,
) -> ActionResult {
    match pipeline(inner, guard, session, arguments).await {
        Ok(result) => result,
        Err(refusal) => refuse(inner, guard, refusal).await,
    }
}

/// Stages 1–4 only: nothing is recorded, nothing is sent, no human is asked.
pub(super) fn preflight(
    inner: &Inner,
    guard: &mut CallGuard,
    session: &Session,
    arguments: Value,
) -> Result<(), Refusal> {
    let resolved = resolve(inner, guard)?;
    let decoded = validate(inner, guard, resolved, arguments)?;
    authorize(inner, guard, session, decoded).map(|_| ())
}

async fn pipeline(
    inner: &Inner,
    guard: &mut CallGuard,
    session: &Session,
    arguments: Value,
) -> Result<ActionResult, Refusal> {
    let resolved = resolve(inner, guard)?;
    let decoded = validate(inner, guard, resolved, arguments)?;
    let authorized = authorize(inner, guard, session, decoded)?;
    let ready = prepare(inner, guard, authorized).await?;
    let consented = consent(inner, guard, ready).await?;
    // Consent can take minutes: the vault may have been locked, or the credential replaced
    // or removed, meanwhile. The channel checks again before each send.
    still_ready(inner.vault.as_deref(), consented.ready.resolved().as_ref()).await?;
    let intended = intent(inner, guard, consented).await?;
    Ok(dispatch(inner, guard, intended).await)
}

fn resolve(inner: &Inner, guard: &CallGuard) -> Result<Resolved, Refusal> {
    match inner.catalog.get(&guard.action) {
        Some(entry) => Ok(Resolved {
            entry: Arc::clone(entry),
        }),
        None => {
            let known: Vec<&str> = inner.catalog.names().collect();
            Err(Refusal::new(
                RefusalCode::UnknownAction,
                format!(
                    "no action named `{}`; available: {}",
                    guard.action,
                    known.join(", ")
                ),
            ))
        }
    }
}

fn validate(
    inner: &Inner,
    guard: &mut CallGuard,
    resolved: Resolved,
    mut arguments: Value,
) -> Result<Decoded, Refusal> {
    let entry = resolved.entry;
    guard.definition_hash = Some(entry.definition_hash().to_owned());
    let canonical = canonical_json(&arguments);
    if canonical.len() > inner.max_argument_bytes {
        return Err(Refusal::new(
            RefusalCode::ArgumentsTooLarge,
            format!(
                "arguments are {} bytes; the limit is {}",
                canonical.len(),
                inner.max_argument_bytes
            ),
        ));
    }
    let decision = entry.guard.check(inner.drift_mode, &mut arguments);
    if !decision.allowed {
        return Err(Refusal::new(RefusalCode::InvalidArguments, decision.detail)
            .with_divergences(decision.divergences));
    }
    if matches!(decision.verdict, Verdict::Warned | Verdict::Shadowed) {
        guard.divergences = decision.divergences;
    }
    let canonical = if inner.drift_mode == DriftMode::Strict {
        canonical
    } else {
        canonical_json(&arguments)
    };
    let decoded = entry.decode(arguments.clone()).map_err(|e| {
        Refusal::new(
            RefusalCode::InvalidArguments,
            format!(
                "arguments do not decode: {}",
                crate::drift::describe_serde_error(&e)
            ),
        )
    })?;
    guard.objects = decoded.objects;
    guard.note = decoded.note.map(|n| shown_note(&guard.scrubber, &n));
    Ok(Decoded {
        entry,
        arguments,
        canonical,
        input: decoded.input,
    })
}

fn authorize(
    inner: &Inner,
    guard: &mut CallGuard,
    session: &Session,
    decoded: Decoded,
) -> Result<Authorized, Refusal> {
    for object in &guard.objects {
        if !session.permits(&object.kind, &object.value) {
            return Err(Refusal::new(
                RefusalCode::OutOfScope,
                format!(
                    "{} {} is outside this session's scope",
                    object.kind, object.value
                ),
            ));
        }
    }
    let spec = decoded.entry.spec();
    let channel = spec
        .target
        .channel_name()
        .and_then(|name| inner.channels.get(name))
        .cloned()
        .ok_or_else(|| {
            Refusal::new(
                RefusalCode::ChannelUnavailable,
                format!("action `{}` has no channel configured", spec.name),
            )
        })?;
    let summary = channel.prepare(&CallView {
        spec,
        arguments: &decoded.arguments,
        input: decoded.input.as_ref(),
    })?;
    guard.request = Some(summary.0);
    Ok(Authorized { decoded, channel })
}

async fn prepare(
    inner: &Inner,
    guard: &mut CallGuard,
    authorized: Authorized,
) -> Result<Ready, Refusal> {
    let entry = &authorized.decoded.entry;
    let spec = entry.spec();
    // Stage 5: definition drift.
    if let Some(definition) = &inner.definition_guard {
        definition.check(&spec.name, entry.definition_hash())?;
    }
    // Stage 6: vault.
    let mut credential = None;
    if let Some(vault) = &inner.vault
        && vault.state() == VaultState::Locked
    {
        return Err(Refusal::new(
            RefusalCode::VaultLocked,
            "the credential vault is locked; a human must unlock it before any call",
        ));
    }
    if let Some(name) = &spec.credential {
        let vault = inner.vault.as_ref().ok_or_else(|| {
            Refusal::new(RefusalCode::CredentialUnavailable, "no vault is configured")
        })?;
        let resolved = vault.resolve(name).await.map_err(|e| match e {
            VaultError::Locked => Refusal::new(
                RefusalCode::VaultLocked,
                "the credential vault is locked; a human must unlock it before any call",
            ),
            VaultError::NotFound(_) => Refusal::new(
                RefusalCode::CredentialUnavailable,
                format!("credential `{name}` is not in the vault"),
            ),
            _ => Refusal::new(
                RefusalCode::CredentialUnavailable,
                format!("credential `{name}` could not be read from the vault"),
            ),
        })?;
        let rejected_version = inner
            .unusable
            .lock()
            .ok()
            .and_then(|u| u.get(name.as_ref()).copied());
        if rejected_version == Some(resolved.meta().version) {
            return Err(Refusal::new(
                RefusalCode::CredentialUnavailable,
                format!(
                    "credential `{name}` was rejected by the upstream earlier; a human must replace it"
                ),
            ));
        }
        authorized.channel.check_credential(
            &CallView {
                spec,
                arguments: &authorized.decoded.arguments,
                input: authorized.decoded.input.as_ref(),
            },
            resolved.meta(),
        )?;
        credential = Some(resolved);
    }
    // The call's scrubber, from here on for every text of the call: the vault's now (it
    // knows the resolved value, unless the vault changed in between), plus that value.
    if let Some(vault) = &inner.vault {
        let scrubber = vault.scrubber();
        guard.scrubber =
            match &credential {
                Some(c) if !covers(&scrubber, c) => {
                    let secret = c.secret();
                    Arc::new(scrubber.extended(
                        std::iter::once(secret.expose()).chain(secret.expose_passphrase()),
                    ))
                }
                _ => scrubber,
            };
    }
    // Stage 7: preconditions.
    if entry.has_precondition() {
        entry
            .precheck(Arc::clone(&authorized.decoded.input))
            .await
            .map_err(|reason| {
                Refusal::new(
                    RefusalCode::PreconditionFailed,
                    guard.scrubber.bounded(&reason, MAX_REASON),
                )
            })?;
    }
    Ok(Ready {
        authorized,
        credential,
    })
}

async fn consent(inner: &Inner, guard: &mut CallGuard, ready: Ready) -> Result<Consented, Refusal> {
    let entry = &ready.authorized.decoded.entry;
    let spec = entry.spec();
    let hash = entry.definition_hash();
    match spec.consent {
        ConsentRule::None => {
            guard.consent = Some(ConsentOutcome::NotRequired);
            return Ok(Consented { ready });
        }
        ConsentRule::Session if inner.grants.has(&guard.session_id, &spec.name, hash) => {
            guard.consent = Some(ConsentOutcome::SessionGrant);
            return Ok(Consented { ready });
        }
        ConsentRule::Session | ConsentRule::PerCall => {}
    }
    let Some(provider) = &inner.consent else {
        guard.consent = Some(ConsentOutcome::Unavailable);
        return Err(Refusal::new(
            RefusalCode::ConsentUnavailable,
            "this action needs a human's approval and no one can be asked here",
        ));
    };
    let request = ConsentRequest {
        attempt_id: guard.attempt_id.to_string(),
        session_id: guard.session_id.clone(),
        action: spec.name.to_string(),
        summary: spec.summary.to_string(),
        effect: spec.effect,
        externality: spec.externality,
        rule: spec.consent,
        objects: guard.objects.clone(),
        note: guard.note.clone(),
        request: guard.request.clone().unwrap_or_default(),
        definition_hash: hash.to_owned(),
        display: ConsentDisplay::default(),
    };
    // The human sees no secret either: an agent may have written one into its note. The
    // display form is escaped from the scrubbed text, and shown whole or not at all.
    let request = scrub_consent(&guard.scrubber, request).with_display();
    let shown = request.display.shown_bytes();
    if shown > MAX_SHOWN_BYTES {
        guard.consent = Some(ConsentOutcome::TooLargeToShow);
        return Err(Refusal::new(
            RefusalCode::ArgumentsTooLarge,
            format!(
                "this call needs a human's approval, and its request is {shown} bytes as shown; a consent prompt shows at most {MAX_SHOWN_BYTES} bytes and never cuts one; nothing was sent; call again with shorter values"
            ),
        ));
    }
    let decision = tokio::time::timeout(inner.consent_timeout, provider.ask(&request)).await;
    match decision {
        Err(_) => {
            guard.consent = Some(ConsentOutcome::Timeout);
            Err(Refusal::new(
                RefusalCode::ConsentTimeout,
                format!(
                    "no one answered the consent request within {} s; nothing was sent",
                    inner.consent_timeout.as_secs()
                ),
            ))
        }
        Ok(ConsentDecision::Approve) => {
            if spec.consent == ConsentRule::Session {
                inner
                    .grants
                    .grant(&guard.session_id, &spec.name, hash, inner.session_grant_ttl);
                guard.consent = Some(ConsentOutcome::ApprovedForSession);
            } else {
                guard.consent = Some(ConsentOutcome::Approved);
            }
            Ok(Consented { ready })
        }
        Ok(ConsentDecision::ApproveForSession { ttl }) => {
            if spec.consent == ConsentRule::Session {
                inner.grants.grant(&guard.session_id, &spec.name, hash, ttl);
                guard.consent = Some(ConsentOutcome::ApprovedForSession);
            } else {
                guard.consent = Some(ConsentOutcome::Approved);
            }
            Ok(Consented { ready })
        }
        Ok(ConsentDecision::Deny { reason }) => {
            guard.consent = Some(ConsentOutcome::Denied);
            let reason = match reason {
                Some(r) => format!(
                    "a human denied this call: {}",
                    guard.scrubber.bounded(&r, 200)
                ),
                None => "a human denied this call".to_owned(),
            };
            Err(Refusal::new(RefusalCode::ConsentDenied, reason))
        }
        Ok(ConsentDecision::Unavailable) => {
            guard.consent = Some(ConsentOutcome::Unavailable);
            Err(Refusal::new(
                RefusalCode::ConsentUnavailable,
                "this action needs a human's approval and no one could be asked",
            ))
        }
    }
}

async fn intent(
    inner: &Inner,
    guard: &mut CallGuard,
    consented: Consented,
) -> Result<Intended, Refusal> {
    let decoded = &consented.ready.authorized.decoded;
    let spec = decoded.entry.spec();
    let idempotency_key = IdempotencyKey::generate();
    let mut h = Sha256::new();
    h.update(spec.name.as_bytes());
    h.update(b"\n");
    h.update(decoded.entry.definition_hash().as_bytes());
    h.update(b"\n");
    h.update(decoded.canonical.as_bytes());
    let intent = Intent {
        attempt_id: guard.attempt_id.clone(),
        action: spec.name.to_string(),
        session_id: guard.session_id.clone(),
        idempotency_key: idempotency_key.clone(),
        fingerprint: hex::encode(h.finalize()),
        definition_hash: decoded.entry.definition_hash().to_owned(),
        effect: spec.effect,
        arguments: {
            // The journal stores arguments for reconcile; never a secret value among them.
            let mut arguments = decoded.arguments.clone();
            guard.scrubber.scrub_json(&mut arguments);
            arguments
        },
        durable: spec.effect.is_mutating(),
    };
    inner.journal.write_intent(&intent).await.map_err(|e| {
        tracing::error!(attempt = %guard.attempt_id, error = %e, "intent write failed; nothing sent");
        Refusal::new(
            RefusalCode::JournalUnavailable,
            "the attempt could not be recorded, so nothing was sent; retrying later is safe",
        )
    })?;
    Ok(Intended {
        consented,
        idempotency_key,
    })
}

async fn dispatch(inner: &Inner, guard: &mut CallGuard, intended: Intended) -> ActionResult {
    let ready = &intended.consented.ready;
    let decoded = &ready.authorized.decoded;
    let spec = decoded.entry.spec();
    let context = Arc::new(DispatchContext::new(
        guard.attempt_id.clone(),
        Arc::clone(&inner.journal),
        spec.effect.is_mutating(),
        inner.vault.clone(),
        ready.resolved(),
        Arc::clone(&guard.scrubber),
    ));
    guard.dispatch = Some(Arc::clone(&context));
    let outcome = ready
        .authorized
        .channel
        .dispatch(Dispatch {
            spec,
            arguments: &decoded.arguments,
            input: decoded.input.as_ref(),
            attempt_id: &guard.attempt_id,
            idempotency_key: &intended.idempotency_key,
            credential: ready.credential.as_ref(),
            context: &context,
        })
        .await;
    // Stage 11: normalize.
    let outcome = normalize(outcome, context.sends());
    if outcome.credential_rejected
        && let (Some(name), Some(credential)) = (&spec.credential, &ready.credential)
        && let Ok(mut unusable) = inner.unusable.lock()
    {
        unusable.insert(name.to_string(), credential.meta().version);
    }
    let mut result = ActionResult::new(outcome.status, &guard.action, guard.attempt_id.clone());
    if matches!(outcome.status, Status::Rejected | Status::Unknown)
        || outcome.origin == Origin::Executor
    {
        result.origin = Some(outcome.origin);
    }
    result.code = outcome.code.clone();
    result.reason = outcome
        .reason
        .as_deref()
        .map(|r| guard.scrubber.bounded(r, MAX_REASON));
    result.data = outcome.data.clone();
    result.next = outcome.next.clone().or_else(|| {
        matches!(outcome.status, Status::Pending | Status::Unknown)
            .then(|| {
                next_call(
                    inner,
                    decoded.entry.as_ref(),
                    &decoded.arguments,
                    outcome.data.as_ref(),
                )
            })
            .flatten()
    });
    if outcome.status == Status::Unknown && result.reason.is_none() {
        result.reason = Some(match &result.next {
            Some(next) => format!(
                "the outcome is unknown; do not retry; check with {}",
                next.action
            ),
            None => "the outcome is unknown; do not retry".to_owned(),
        });
    }
    // Stage 12: filter, with the call's scrubber (a vault locked meanwhile cannot empty it).
    let scrubber = Arc::clone(&guard.scrubber);
    filter(&scrubber, &mut result);
    // Stage 13: record.
    let phase = Phase::Finished;
    let mut event = guard.event(
        phase,
        result.status,
        result.origin,
        result.code.clone(),
        result.reason.clone(),
    );
    event.upstream_status = outcome.upstream_status;
    scrub_event(&scrubber, &mut event);
    match inner.journal.append(event).await {
        Ok(record) => result.receipt_id = Some(record.event.receipt_id),
        Err(e) => {
            tracing::error!(attempt = %guard.attempt_id, error = %e, "audit append failed after dispatch");
        }
    }
    result
}

/// Stage 11 rules that hold for every channel: nothing sent means nothing happened; an
/// outcome claimed by the executor after a send is at best unknown.
fn normalize(mut outcome: ChannelOutcome, sends: u32) -> ChannelOutcome {
    if sends == 0 && outcome.status != Status::Rejected {
        // A channel that reports success without ever sending is wrong; be conservative.
        outcome.status = Status::Rejected;
        outcome.origin = Origin::Executor;
        outcome.code = Some(
            outcome
                .code
                .unwrap_or(Code::Upstream(UpstreamCode::NotSent)),
        );
        outcome.data = None;
    }
    outcome
}

/// The follow-up call: the action's reconcile action, with its input fields taken from the
/// result data first and the original arguments second.
fn next_call(
    inner: &Inner,
    entry: &Entry,
    arguments: &Value,
    data: Option<&Value>,
) -> Option<Next> {
    let reconcile = entry.spec().reconcile.as_ref()?;
    // The catalog refuses a reconcile action it does not hold, so the lookup succeeds; a
    // reconcile action whose schema names no properties takes no arguments: `{}`.
    let properties = inner
        .catalog
        .get(reconcile)
        .and_then(|target| target.input_schema().get("properties"))
        .and_then(Value::as_object);
    let mut args = Map::new();
    for name in properties.into_iter().flat_map(Map::keys) {
        let value = data
            .and_then(|d| d.get(name))
            .or_else(|| arguments.get(name));
        if let Some(v) = value {
            args.insert(name.clone(), v.clone());
        }
    }
    Some(Next {
        action: reconcile.to_string(),
        arguments: Value::Object(args),
    })
}

/// Whether `scrubber` knows every value of `credential`.
fn covers(scrubber: &Scrubber, credential: &Credential) -> bool {
    let secret = credential.secret();
    scrubber.covers(secret.expose())
        && secret
            .expose_passphrase()
            .is_none_or(|p| scrubber.covers(p))
}

fn filter(scrubber: &Scrubber, result: &mut ActionResult) {
    if let Some(reason) = &mut result.reason {
        *reason = scrubber.scrub(reason).into_owned();
    }
    // A channel may report a code of its own making: it passes the scrubber too.
    if let Some(code) = &mut result.code
        && let std::borrow::Cow::Owned(clean) = scrubber.scrub(code.as_str())
    {
        *code = Code::from(clean);
    }
    if let Some(data) = &mut result.data {
        scrubber.scrub_json(data);
    }
    if let Some(next) = &mut result.next {
        scrubber.scrub_json(&mut next.arguments);
    }
}

fn scrub_consent(scrubber: &Scrubber, mut request: ConsentRequest) -> ConsentRequest {
    for text in [&mut request.request, &mut request.action]
        .into_iter()
        .chain(request.note.as_mut())
    {
        *text = scrub_cut(scrubber, text);
    }
    for object in &mut request.objects {
        object.value = scrubber.scrub(&object.value).into_owned();
    }
    request
}

/// Records a refusal (exactly one audit record) and answers the agent.
pub(super) async fn refuse(inner: &Inner, guard: &mut CallGuard, refusal: Refusal) -> ActionResult {
    let scrubber = Arc::clone(&guard.scrubber);
    let reason = scrubber.bounded(&refusal.reason, MAX_REASON);
    let action = scrubber.scrub(&guard.action).into_owned();
    let mut result = ActionResult::new(Status::Rejected, &action, guard.attempt_id.clone());
    result.origin = Some(Origin::Executor);
    result.code = Some(refusal.code.into());
    result.reason = Some(reason.clone());
    result.divergences = refusal.divergences.clone();
    if guard.divergences.is_empty() {
        guard.divergences = refusal.divergences;
    }
    let mut event = guard.event(
        Phase::Refused,
        Status::Rejected,
        Some(Origin::Executor),
        Some(refusal.code.into()),
        Some(reason),
    );
    if let Some(mut decision) = refusal.decision {
        // The decision is audited by this record: its receipt is the record's.
        decision.receipt_id = Some(event.receipt_id.clone());
        result.drift = Some(decision.partner());
        event.drift_decision = Some(decision);
    }
    scrub_event(&scrubber, &mut event);
    match inner.journal.append(event).await {
        Ok(record) => result.receipt_id = Some(record.event.receipt_id),
        Err(e) => {
            tracing::error!(attempt = %guard.attempt_id, error = %e, "audit append failed for a refusal");
            if let Some(drift) = &mut result.drift {
                drift.receipt_id = None;
            }
        }
    }
    result
}
