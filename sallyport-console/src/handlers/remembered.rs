//! Remembered approvals: approve and remember from an approval's card, the list, and
//! revocation. Every state change needs a session and its CSRF token, like a decision.

use std::time::Duration;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use sallyport_core::approval::{
    self, ApprovalError, ApprovalId, Decided, RememberChoice, RememberedId, Revoked,
};
use serde::Deserialize;

use super::{
    CHANNEL, St, form_poster, journal_unavailable, render, session, status_page, text, to_login,
};
use crate::console::Backend;
use crate::pages;

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    #[serde(default)]
    done: Option<String>,
}

/// `GET /remembered`: every remembered approval, newest first.
pub(crate) async fn page(State(shared): St, headers: HeaderMap, q: Query<ListQuery>) -> Response {
    let Some((_, info)) = session(&shared, &headers) else {
        return to_login();
    };
    let listed = match shared.backend.approval_store() {
        Ok(store) => store.remembered_approvals(None).await,
        Err(e) => Err(e),
    };
    let Ok(listed) = listed else {
        return journal_unavailable(&shared, Some(&info));
    };
    let flash = match q.done.as_deref() {
        Some("revoked") => Some("Revoked: the next call it covered is asked again."),
        Some("already") => Some("It was already revoked; nothing changed."),
        _ => None,
    };
    let body = pages::remembered::list(
        &text(&shared),
        &info.csrf,
        &listed,
        sallyport_core::clock::now_ms(),
        flash,
    );
    render(&shared, Some(&info), "/remembered", "Remembered", &body).into_response()
}

#[derive(Deserialize)]
pub(crate) struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

#[derive(Deserialize)]
pub(crate) struct RememberForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    scope: String,
}

/// `POST /approvals/{id}/remember`: approve the parked call and remember the approval.
pub(crate) async fn remember(
    State(shared): St,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<RememberForm>,
) -> Response {
    let info = match form_poster(
        &shared,
        &headers,
        &form.csrf,
        "decided",
        "Open the page again.",
    ) {
        Ok(info) => info,
        Err(refused) => return *refused,
    };
    let hour = Duration::from_secs(3600);
    let choice = match form.scope.as_str() {
        "exact" => RememberChoice::ExactArguments,
        "session" => RememberChoice::Session,
        "window-1h" => RememberChoice::Window(hour),
        "window-8h" => RememberChoice::Window(8 * hour),
        "window-7d" => RememberChoice::Window(7 * 24 * hour),
        _ => {
            return status_page(
                &shared,
                Some(&info),
                StatusCode::BAD_REQUEST,
                "Pick a scope",
                "The form named no scope this console offers; nothing was decided.",
            );
        }
    };
    let Ok(store) = shared.backend.approval_store() else {
        return journal_unavailable(&shared, Some(&info));
    };
    let id = ApprovalId::from_stored(id);
    let decider = info.decider(CHANNEL);
    let policy = match &shared.backend {
        Backend::Executor(e) => e.decision_policy().map(|p| p.as_ref()),
        Backend::Journal(_) => None,
    };
    let outcome = approval::remember_under(store, policy, &id, &decider, None, choice).await;
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(ApprovalError::NotRememberable(why)) => {
            return status_page(
                &shared,
                Some(&info),
                StatusCode::BAD_REQUEST,
                "Not remembered",
                &format!("{why}. Nothing was decided."),
            );
        }
        Err(ApprovalError::NotFound(_)) => {
            return status_page(
                &shared,
                Some(&info),
                StatusCode::NOT_FOUND,
                "No such approval",
                "This journal has no approval with that id.",
            );
        }
        Err(_) => return journal_unavailable(&shared, Some(&info)),
    };
    let done = match &outcome.decided {
        Decided::Refused { reason, .. } => {
            return status_page(
                &shared,
                Some(&info),
                StatusCode::FORBIDDEN,
                "Decision refused",
                reason,
            );
        }
        Decided::Recorded(_) => "recorded",
        Decided::Expired(_) => "expired",
        _ => "already",
    };
    if let (Backend::Executor(e), Some(_)) = (&shared.backend, &outcome.remembered) {
        // Approved: carry the call out, as a console decision through the executor does.
        let _ = e.resume_approval(&id).await;
    }
    tracing::info!(approval = %id.as_str(), user = %info.user, done, remembered = outcome.remembered.as_ref().map(|r| r.remembered_id.as_str()), "console approve and remember");
    Redirect::to(&format!("/approvals/{}?done={done}", id.as_str())).into_response()
}

/// `POST /remembered/{id}/revoke`: revoke a remembered approval (audited).
pub(crate) async fn revoke(
    State(shared): St,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    let info = match form_poster(
        &shared,
        &headers,
        &form.csrf,
        "revoked",
        "Open the page again.",
    ) {
        Ok(info) => info,
        Err(refused) => return *refused,
    };
    let Ok(store) = shared.backend.approval_store() else {
        return journal_unavailable(&shared, Some(&info));
    };
    let id = RememberedId::from_stored(id);
    let by = info.decider(CHANNEL);
    let done = match approval::revoke_remembered(store, &id, &by).await {
        Ok(Revoked::Applied(_)) => "revoked",
        Ok(Revoked::Unchanged(_)) => "already",
        Ok(Revoked::NotFound) => {
            return status_page(
                &shared,
                Some(&info),
                StatusCode::NOT_FOUND,
                "No such remembered approval",
                "This journal has no remembered approval with that id.",
            );
        }
        Err(_) => return journal_unavailable(&shared, Some(&info)),
    };
    tracing::info!(remembered = %id.as_str(), user = %info.user, done, "console revocation");
    Redirect::to(&format!("/remembered?done={done}")).into_response()
}
