//! The console's handlers.

use std::sync::Arc;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::Markup;
use sallyport_core::action::EffectClass;
use sallyport_core::approval::{self, ApprovalFilter, ApprovalId, ApprovalState, Decided, Verdict};
use sallyport_core::journal::HeadVerifyingKey;
use serde::Deserialize;

use crate::auth::{SessionInfo, cookie, random_hex, same};
use crate::console::{Backend, COOKIE_NAME, Shared};
use crate::pages::{self, Frame};
use crate::render::Text;
use crate::throttle::Client;

pub(crate) mod connect;
#[cfg(feature = "oidc")]
pub(crate) mod oidc;
pub(crate) mod remembered;

type St = State<Arc<Shared>>;

/// The cookie that carries the login form's CSRF token (before there is a session).
const LOGIN_COOKIE: &str = "sallyport_console_login";

/// The channel every console decision is recorded through.
const CHANNEL: &str = "console";

fn render(
    shared: &Shared,
    session: Option<&SessionInfo>,
    current: &str,
    title: &str,
    body: &Markup,
) -> Html<String> {
    let frame = Frame {
        session,
        carries_out: shared.backend.carries_out(),
        connect: shared.connect.is_some(),
        current,
    };
    Html(pages::page(&frame, title, body).into_string())
}

fn text(shared: &Shared) -> Text {
    Text::new(shared.scrubber())
}

/// The session the request's cookie names.
fn session(shared: &Shared, headers: &HeaderMap) -> Option<(String, SessionInfo)> {
    let id = cookie(headers, COOKIE_NAME)?;
    let info = shared.sessions.get(id)?;
    Some((id.to_owned(), info))
}

/// The signed-in person posting a form that carries `csrf`, or the answer that refuses the
/// post and changes nothing: `401` without a session (the text says nothing was `undone`,
/// e.g. "decided"), the "form expired" page when the token is not this session's (its text
/// ends with `reopen`).
fn form_poster(
    shared: &Shared,
    headers: &HeaderMap,
    csrf: &str,
    undone: &str,
    reopen: &str,
) -> Result<SessionInfo, Box<Response>> {
    let Some((_, info)) = session(shared, headers) else {
        return Err(Box::new(
            (
                StatusCode::UNAUTHORIZED,
                format!("log in first: nothing was {undone}"),
            )
                .into_response(),
        ));
    };
    if csrf.is_empty() || !same(&info.csrf, csrf) {
        return Err(Box::new(status_page(
            shared,
            Some(&info),
            StatusCode::FORBIDDEN,
            "The form expired",
            &format!(
                "This form did not carry this session's token, so nothing was {undone}. {reopen}"
            ),
        )));
    }
    Ok(info)
}

/// A page for a person who is not logged in: to the login page.
fn to_login() -> Response {
    Redirect::to("/login").into_response()
}

fn status_page(
    shared: &Shared,
    session: Option<&SessionInfo>,
    status: StatusCode,
    heading: &str,
    text: &str,
) -> Response {
    (
        status,
        render(shared, session, "", heading, &pages::message(heading, text)),
    )
        .into_response()
}

fn journal_unavailable(shared: &Shared, session: Option<&SessionInfo>) -> Response {
    status_page(
        shared,
        session,
        StatusCode::SERVICE_UNAVAILABLE,
        "The journal cannot be read",
        "The approval store cannot be used right now; nothing was changed. Try again.",
    )
}

fn cookie_attrs(shared: &Shared) -> &'static str {
    if shared.tls {
        "Path=/; HttpOnly; SameSite=Strict; Secure"
    } else {
        "Path=/; HttpOnly; SameSite=Strict"
    }
}

/// The attributes of a cookie that binds a flow through a provider (a connect, an OpenID
/// sign-in) to the browser that started it: sent back only to `path` (the callback), and
/// on the provider's top-level redirect (`SameSite=Lax`: the session cookie is `Strict`,
/// which a browser holds back on a redirect from another site).
pub(crate) fn binding_attrs(shared: &Shared, path: &str) -> String {
    cookie_attrs(shared)
        .replace("Path=/;", &format!("Path={path};"))
        .replace("SameSite=Strict", "SameSite=Lax")
}

/// `response` with `cookie` set.
pub(crate) fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

/// The OpenID Connect provider's name on the login page, when the console signs in
/// through one.
fn oidc_provider(shared: &Shared) -> Option<&str> {
    #[cfg(feature = "oidc")]
    return shared.oidc.as_ref().map(|o| o.login.provider_name.as_str());
    #[cfg(not(feature = "oidc"))]
    {
        let _ = shared;
        None
    }
}

pub(crate) async fn index() -> Redirect {
    Redirect::to("/approvals")
}

pub(crate) async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("style.css"),
    )
        .into_response()
}

#[derive(Deserialize)]
pub(crate) struct LoginQuery {
    #[serde(default)]
    failed: Option<String>,
}

pub(crate) async fn login_page(State(shared): St, Query(q): Query<LoginQuery>) -> Response {
    let Some(nonce) = random_hex(32) else {
        return status_page(
            &shared,
            None,
            StatusCode::SERVICE_UNAVAILABLE,
            "Try again",
            "The random source failed.",
        );
    };
    let body = pages::login(
        &nonce,
        q.failed.is_some(),
        oidc_provider(&shared),
        !shared.users.is_empty(),
    );
    let cookie = format!(
        "{LOGIN_COOKIE}={nonce}; Max-Age=600; {}",
        cookie_attrs(&shared)
    );
    let mut response = render(&shared, None, "", "Log in", &body).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    token: String,
}

pub(crate) async fn login(
    State(shared): St,
    client: Client,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    // A throttled client's token is not looked at: a guesser learns nothing more.
    if let Err(wait) = shared.logins.check(client) {
        tracing::warn!(?client, "console login refused: too many failed attempts");
        return too_many_logins(&shared, wait);
    }
    let nonce_ok = cookie(&headers, LOGIN_COOKIE)
        .is_some_and(|c| !form.csrf.is_empty() && same(c, &form.csrf));
    if !nonce_ok {
        return status_page(
            &shared,
            None,
            StatusCode::FORBIDDEN,
            "The login form expired",
            "Open the login page again and log in from there.",
        );
    }
    let user = shared
        .users
        .iter()
        .find(|(_, token)| token.matches(&form.token))
        .map(|(name, _)| name.clone());
    let Some(user) = user else {
        shared.logins.failed(client);
        tracing::info!(?client, "console login refused: wrong token");
        return Redirect::to("/login?failed=1").into_response();
    };
    shared.logins.succeeded(client);
    let Some(id) = shared.sessions.open(&user) else {
        return status_page(
            &shared,
            None,
            StatusCode::SERVICE_UNAVAILABLE,
            "Try again",
            "The session could not be opened.",
        );
    };
    tracing::info!(user = %user, "console login");
    let mut response = Redirect::to("/approvals").into_response();
    let set = [
        format!("{COOKIE_NAME}={id}; {}", cookie_attrs(&shared)),
        format!("{LOGIN_COOKIE}=; Max-Age=0; {}", cookie_attrs(&shared)),
    ];
    for c in set {
        if let Ok(v) = HeaderValue::from_str(&c) {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    response
}

/// The answer to a throttled login: `429` with `Retry-After` in whole seconds.
fn too_many_logins(shared: &Shared, wait: std::time::Duration) -> Response {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let text = format!(
        "This address failed to log in too often. Try again in {} (nothing was checked).",
        crate::render::countdown(secs * 1000, 0).trim_start_matches("in ")
    );
    let mut response = status_page(
        shared,
        None,
        StatusCode::TOO_MANY_REQUESTS,
        "Too many login attempts",
        &text,
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    response
}

#[derive(Deserialize)]
pub(crate) struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

pub(crate) async fn logout(
    State(shared): St,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    let Some((id, info)) = session(&shared, &headers) else {
        return (StatusCode::UNAUTHORIZED, "log in first").into_response();
    };
    if !same(&info.csrf, &form.csrf) {
        return status_page(
            &shared,
            Some(&info),
            StatusCode::FORBIDDEN,
            "The form expired",
            "Nothing was changed.",
        );
    }
    shared.sessions.close(&id);
    let mut response = Redirect::to("/login").into_response();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{COOKIE_NAME}=; Max-Age=0; {}",
        cookie_attrs(&shared)
    )) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

pub(crate) async fn approvals(State(shared): St, headers: HeaderMap) -> Response {
    let Some((_, info)) = session(&shared, &headers) else {
        return to_login();
    };
    let Ok(journal) = shared.backend.approval_store() else {
        return journal_unavailable(&shared, Some(&info));
    };
    let pending = journal
        .approvals(&ApprovalFilter::states([ApprovalState::Awaiting]).limit(PENDING_SHOWN))
        .await;
    let decided = journal
        .approvals(
            &ApprovalFilter::states(
                ApprovalState::ALL
                    .iter()
                    .copied()
                    .filter(|s| *s != ApprovalState::Awaiting),
            )
            .limit(20),
        )
        .await;
    let (Ok(pending), Ok(decided)) = (pending, decided) else {
        return journal_unavailable(&shared, Some(&info));
    };
    let body = pages::approvals(
        &text(&shared),
        &info.csrf,
        &pending,
        &decided,
        sallyport_core::clock::now_ms(),
    );
    render(&shared, Some(&info), "/approvals", "Approvals", &body).into_response()
}

#[derive(Deserialize)]
pub(crate) struct ApprovalQuery {
    #[serde(default)]
    done: Option<String>,
}

pub(crate) async fn approval(
    State(shared): St,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<ApprovalQuery>,
) -> Response {
    let Some((_, info)) = session(&shared, &headers) else {
        return to_login();
    };
    let found = match shared.backend.approval_store() {
        Ok(store) => store.approval(&ApprovalId::from_stored(id)).await,
        Err(e) => Err(e),
    };
    let found = match found {
        Ok(found) => found,
        Err(_) => return journal_unavailable(&shared, Some(&info)),
    };
    let Some(a) = found else {
        return status_page(
            &shared,
            Some(&info),
            StatusCode::NOT_FOUND,
            "No such approval",
            "This journal has no approval with that id.",
        );
    };
    let flash = match q.done.as_deref() {
        Some("recorded") => Some("Your decision is recorded."),
        Some("already") => {
            Some("Someone decided first: your decision was not recorded. Here is where it stands.")
        }
        Some("expired") => Some(
            "It had expired before your decision: your decision was not recorded, the expiry is, and nothing was sent.",
        ),
        _ => None,
    };
    let body = pages::approval(
        &text(&shared),
        &info.csrf,
        &a,
        sallyport_core::clock::now_ms(),
        flash,
    );
    render(&shared, Some(&info), "/approvals", "Approval", &body).into_response()
}

#[derive(Deserialize)]
pub(crate) struct DecideForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    verdict: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: String,
}

pub(crate) async fn decide(
    State(shared): St,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<DecideForm>,
) -> Response {
    let info = match form_poster(
        &shared,
        &headers,
        &form.csrf,
        "decided",
        "Open the approval again.",
    ) {
        Ok(info) => info,
        Err(refused) => return *refused,
    };
    let verdict = match form.verdict.as_str() {
        "approve" => Verdict::Approve,
        "deny" => Verdict::Deny,
        _ => {
            return status_page(
                &shared,
                Some(&info),
                StatusCode::BAD_REQUEST,
                "Approve or deny",
                "The form named neither; nothing was decided.",
            );
        }
    };
    let id = ApprovalId::from_stored(id);
    let current = match shared.backend.approval_store() {
        Ok(store) => store.approval(&id).await,
        Err(e) => Err(e),
    };
    let current = match current {
        Ok(Some(a)) => a,
        Ok(None) => {
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
    let reason = form.reason.trim();
    if verdict == Verdict::Approve
        && current.effect == EffectClass::IrreversibleOrBroad
        && current.state == ApprovalState::Awaiting
        && form.confirm != "yes"
    {
        let body = pages::confirm(
            &text(&shared),
            &info.csrf,
            &current,
            reason,
            sallyport_core::clock::now_ms(),
        );
        return render(&shared, Some(&info), "/approvals", "Confirm", &body).into_response();
    }
    let decider = info.decider(CHANNEL);
    let reason = (!reason.is_empty()).then_some(reason);
    let decided = match &shared.backend {
        Backend::Executor(e) => e.decide(&id, verdict, &decider, reason).await,
        Backend::Journal(j) => approval::decide(j.as_ref(), &id, verdict, &decider, reason).await,
    };
    let done = match decided {
        Ok(Decided::Refused { reason, .. }) => {
            // Self-approval, no authority, a bad signature: audited, nothing changed.
            return status_page(
                &shared,
                Some(&info),
                StatusCode::FORBIDDEN,
                "Decision refused",
                &reason,
            );
        }
        Ok(Decided::Recorded(_)) => "recorded",
        Ok(Decided::Expired(_)) => "expired",
        // Late after an expiry someone else recorded: it expired, no one decided first.
        Ok(d) if d.approval().state == ApprovalState::Expired => "expired",
        Ok(_) => "already",
        Err(approval::ApprovalError::NotFound(_)) => {
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
    tracing::info!(approval = %id.as_str(), user = %info.user, verdict = verdict.as_str(), done, "console decision");
    Redirect::to(&format!("/approvals/{}?done={done}", id.as_str())).into_response()
}

#[derive(Deserialize)]
pub(crate) struct CallsQuery {
    #[serde(default)]
    status: String,
    #[serde(default)]
    action: String,
}

/// How many pending approvals the approvals page lists (newest first).
const PENDING_SHOWN: usize = 200;

/// How many records the calls page lists.
const CALLS_SHOWN: usize = 200;

pub(crate) async fn calls(
    State(shared): St,
    headers: HeaderMap,
    Query(q): Query<CallsQuery>,
) -> Response {
    let Some((_, info)) = session(&shared, &headers) else {
        return to_login();
    };
    let Ok(records) = shared.backend.journal().records().await else {
        return journal_unavailable(&shared, Some(&info));
    };
    let mut actions: Vec<String> = records.iter().map(|r| r.event.action.clone()).collect();
    actions.sort();
    actions.dedup();
    let shown: Vec<_> = records
        .iter()
        .rev()
        .filter(|r| q.status.is_empty() || r.event.status.as_str() == q.status)
        .filter(|r| q.action.is_empty() || r.event.action == q.action)
        .take(CALLS_SHOWN)
        .collect();
    let body = pages::calls(&text(&shared), &shown, &actions, &q.status, &q.action);
    render(&shared, Some(&info), "/calls", "Calls", &body).into_response()
}

pub(crate) async fn call(
    State(shared): St,
    headers: HeaderMap,
    Path(receipt): Path<String>,
) -> Response {
    let Some((_, info)) = session(&shared, &headers) else {
        return to_login();
    };
    let Ok(records) = shared.backend.journal().records().await else {
        return journal_unavailable(&shared, Some(&info));
    };
    let Some(record) = records
        .iter()
        .find(|r| r.event.receipt_id.as_str() == receipt)
    else {
        return status_page(
            &shared,
            Some(&info),
            StatusCode::NOT_FOUND,
            "No such record",
            "No audit record has that receipt id.",
        );
    };
    let related: Vec<_> = records
        .iter()
        .filter(|r| r.event.attempt_id == record.event.attempt_id)
        .collect();
    let body = pages::call(&text(&shared), record, &related);
    render(&shared, Some(&info), "/calls", "Call", &body).into_response()
}

pub(crate) async fn chain(State(shared): St, headers: HeaderMap) -> Response {
    let Some((_, info)) = session(&shared, &headers) else {
        return to_login();
    };
    let journal = shared.backend.journal();
    let report = match &shared.head_key {
        Some(key) => journal.verify_signed(key).await,
        None => journal.verify().await,
    };
    let (Ok(report), Ok(heads)) = (report, journal.signed_heads().await) else {
        return journal_unavailable(&shared, Some(&info));
    };
    let key = shared.head_key.as_ref().map(HeadVerifyingKey::key_id);
    render(
        &shared,
        Some(&info),
        "/chain",
        "Audit chain",
        &pages::chain(&report, heads.last(), key.as_deref()),
    )
    .into_response()
}

pub(crate) async fn export(State(shared): St, headers: HeaderMap) -> Response {
    let Some((_, info)) = session(&shared, &headers) else {
        return to_login();
    };
    // The same lines as `sallyport_core::journal::export_json_lines` (one record per line).
    let Ok(records) = shared.backend.journal().records().await else {
        return journal_unavailable(&shared, Some(&info));
    };
    let mut out = String::new();
    for record in &records {
        let Ok(line) = serde_json::to_string(record) else {
            return journal_unavailable(&shared, Some(&info));
        };
        out.push_str(&line);
        out.push('\n');
    }
    let body = text(&shared).scrub(&out);
    (
        [
            (header::CONTENT_TYPE, "application/x-ndjson; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"sallyport-audit.jsonl\"",
            ),
        ],
        body,
    )
        .into_response()
}
