//! Signing in with OpenID Connect: `GET /login/oidc` sends the browser to the provider,
//! `GET /login/oidc/callback` takes it back and opens a session.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{
    LOGIN_COOKIE, St, binding_attrs, cookie_attrs, render, session, status_page, with_cookie,
};
use crate::auth::{cookie, random_hex};
use crate::connect::store::{CONNECT_TTL, InFlight, Taken};
use crate::console::{COOKIE_NAME, Shared};
use crate::oidc::{CALLBACK_PATH, Pending};
use crate::pages;

/// The prefix of the cookie that binds a sign-in to the browser that started it (its name
/// ends with a random suffix, so two tabs can sign in at once).
const BINDING_COOKIE: &str = "sallyport_console_oidc_";

/// A page saying the sign-in failed: nobody is signed in.
fn not_signed_in(shared: &Shared, status: StatusCode, text: &str) -> Response {
    status_page(shared, None, status, "Not signed in", text)
}

/// The page for a console without OpenID Connect sign-in.
fn not_configured(shared: &Shared) -> Response {
    not_signed_in(
        shared,
        StatusCode::NOT_FOUND,
        "This console has no OpenID Connect sign-in.",
    )
}

/// `GET /login/oidc`: a link, not a form, so the console's `form-action 'self'` policy
/// need not name the provider. Starting a sign-in changes nothing a forged request could
/// use: only the browser holding the binding cookie can finish it.
pub(crate) async fn start(State(shared): St) -> Response {
    let Some(oidc) = shared.oidc.as_ref() else {
        return not_configured(&shared);
    };
    let started = oidc.start().await;
    let (url, state, pending) = match started {
        Ok(started) => started,
        Err(failure) => {
            tracing::warn!(reason = %failure, "console sign-in not started");
            return not_signed_in(
                &shared,
                StatusCode::BAD_GATEWAY,
                &format!("{failure} Nobody was signed in; try again later."),
            );
        }
    };
    let (Some(suffix), Some(nonce), Ok(location)) =
        (random_hex(8), random_hex(32), HeaderValue::from_str(&url))
    else {
        return not_signed_in(
            &shared,
            StatusCode::SERVICE_UNAVAILABLE,
            "The sign-in could not be started; try again.",
        );
    };
    let kept = oidc.flights.keep(
        &state,
        InFlight::new(
            Box::new(pending),
            String::new(),
            suffix.clone(),
            nonce.clone(),
        ),
    );
    if !kept {
        return not_signed_in(
            &shared,
            StatusCode::SERVICE_UNAVAILABLE,
            "Too many sign-ins are in progress right now; try again in a few minutes.",
        );
    }
    let binding = format!(
        "{BINDING_COOKIE}{suffix}={nonce}; Max-Age={}; {}",
        CONNECT_TTL.as_secs(),
        binding_attrs(&shared, CALLBACK_PATH)
    );
    let mut response = StatusCode::SEE_OTHER.into_response();
    response.headers_mut().insert(header::LOCATION, location);
    with_cookie(response, &binding)
}

/// `GET /login/oidc/callback`: the provider's redirect back, finished at most once.
pub(crate) async fn callback(
    State(shared): St,
    headers: HeaderMap,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let Some(oidc) = shared.oidc.as_ref() else {
        return not_configured(&shared);
    };
    let one = |name: &str| {
        let mut found = pairs.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
        match (found.next(), found.next()) {
            (Some(v), None) => Some(v.as_str()),
            _ => None,
        }
    };
    let Some(state) = one("state") else {
        tracing::info!("console sign-in refused: the callback carries no state");
        return not_signed_in(
            &shared,
            StatusCode::BAD_REQUEST,
            "This address carries no sign-in state. Nobody was signed in; start again from the login page.",
        );
    };
    let taken = oidc.flights.take(state, |suffix| {
        cookie(&headers, &format!("{BINDING_COOKIE}{suffix}"))
    });
    let flight = match taken {
        Taken::Unknown => {
            tracing::info!("console sign-in refused: unknown, expired or used state");
            return not_signed_in(
                &shared,
                StatusCode::BAD_REQUEST,
                "This sign-in is unknown, expired or already finished. Nobody was signed in; start again from the login page.",
            );
        }
        Taken::OtherBrowser => {
            tracing::info!("console sign-in refused: the callback came to another browser");
            return not_signed_in(
                &shared,
                StatusCode::FORBIDDEN,
                "This sign-in was started in another browser, or its cookie expired. Nobody was signed in; start again from the login page in this browser.",
            );
        }
        Taken::Found(flight) => flight,
    };
    let clear = format!(
        "{BINDING_COOKIE}{}=; Max-Age=0; {}",
        flight.cookie,
        binding_attrs(&shared, CALLBACK_PATH)
    );
    let refuse =
        |status: StatusCode, text: &str| with_cookie(not_signed_in(&shared, status, text), &clear);
    let Ok(pending) = flight.pending.downcast::<Pending>() else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "This sign-in cannot be finished here. Nobody was signed in.",
        );
    };
    let issuers = pairs.iter().filter(|(k, _)| k == "iss").count();
    if issuers > 1 || !oidc.is_own_issuer(one("iss")) {
        tracing::info!("console sign-in refused: the redirect names another issuer");
        return refuse(
            StatusCode::FORBIDDEN,
            "The provider's answer names another issuer than this console's provider. Nobody was signed in.",
        );
    }
    if let Some(error) = one("error") {
        let code = if !error.is_empty()
            && error.len() <= 64
            && error
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            error
        } else {
            "unreadable"
        };
        tracing::info!(error = code, "console sign-in refused by the provider");
        return refuse(
            StatusCode::FORBIDDEN,
            &format!("The provider refused the sign-in ({code}). Nobody was signed in."),
        );
    }
    let Some(code) = one("code").filter(|c| !c.is_empty()) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "The provider's answer carries no code. Nobody was signed in.",
        );
    };
    let person = match oidc.finish(*pending, code).await {
        Ok(person) => person,
        Err(failure) => {
            tracing::info!(reason = %failure, "console sign-in refused");
            return refuse(
                StatusCode::FORBIDDEN,
                &format!("{failure} Nobody was signed in."),
            );
        }
    };
    let Some(id) =
        shared
            .sessions
            .open_for(&person.subject, person.name.clone(), person.groups.clone())
    else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "The session could not be opened; try again.",
        );
    };
    tracing::info!(user = %person.subject, name = person.name.as_deref().unwrap_or(""), groups = ?person.groups, "console sign-in");
    // An ending session that was open in this browser is closed.
    if let Some((old, _)) = session(&shared, &headers) {
        shared.sessions.close(&old);
    }
    let info = shared.sessions.get(&id);
    let shown = info
        .as_ref()
        .map_or(person.subject.as_str(), |i| i.shown_name());
    let body = pages::signed_in(shown, &oidc.login.provider_name);
    let mut response = render(&shared, info.as_ref(), "", "Signed in", &body).into_response();
    // On to the approvals from this page: a navigation this console starts, so the browser
    // sends the `SameSite=Strict` session cookie (it may hold it back on the provider's
    // cross-site redirect chain).
    response.headers_mut().insert(
        axum::http::HeaderName::from_static("refresh"),
        HeaderValue::from_static("0; url=/approvals"),
    );
    for c in [
        format!("{COOKIE_NAME}={id}; {}", cookie_attrs(&shared)),
        format!("{LOGIN_COOKIE}=; Max-Age=0; {}", cookie_attrs(&shared)),
        clear,
    ] {
        response = with_cookie(response, &c);
    }
    response
}
