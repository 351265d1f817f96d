//! The "Connect an account" handlers: the page, starting a connect, and the provider's
//! redirect back.

use axum::Form;
use axum::extract::{Query, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::{St, render, session, status_page, text, to_login, with_cookie};
use crate::auth::{SessionInfo, cookie, random_hex, same};
use crate::connect::store::{InFlight, Taken};
use crate::connect::{ConnectRequest, ConnectableAccount, origin};
use crate::console::{ConnectState, Shared};
use crate::pages;

/// The prefix of the cookie that binds a connect to the browser that started it (its name
/// ends with a random suffix, so several connects can be in flight in one browser).
const BINDING_COOKIE: &str = "sallyport_console_connect_";

/// The path the provider redirects back to.
pub(crate) const CALLBACK_PATH: &str = "/connect/callback";

/// The CSP directive naming where the page's forms may go: here, and the providers'
/// authorization endpoints (a browser checks the redirect a form's answer makes, too).
fn form_targets(accounts: &[ConnectableAccount]) -> String {
    let mut origins: Vec<String> = accounts
        .iter()
        .filter_map(|a| origin(&a.authorization_endpoint))
        .collect();
    origins.sort();
    origins.dedup();
    let mut csp = String::from(crate::console::CSP_BASE);
    csp.push_str("; form-action 'self'");
    for o in origins {
        csp.push(' ');
        csp.push_str(&o);
    }
    csp
}

/// The accounts that can be offered: those whose authorization endpoint has an origin a
/// CSP can name (others could not be reached from the page; they are left out and logged).
async fn offered(connect: &ConnectState) -> Result<Vec<ConnectableAccount>, String> {
    let accounts = connect.connector.0.accounts().await.map_err(|f| f.reason)?;
    Ok(accounts
        .into_iter()
        .filter(|a| {
            let ok = origin(&a.authorization_endpoint).is_some();
            if !ok {
                tracing::warn!(credential = %a.credential, "console connect: the authorization endpoint is not an http(s) URL; not offered");
            }
            ok
        })
        .collect())
}

fn no_connector(shared: &Shared, info: Option<&SessionInfo>) -> Response {
    status_page(
        shared,
        info,
        StatusCode::NOT_FOUND,
        "Not found",
        "This console connects no accounts.",
    )
}

#[derive(Deserialize)]
pub(crate) struct PageQuery {
    #[serde(default)]
    done: Option<String>,
}

pub(crate) async fn page(
    State(shared): St,
    headers: HeaderMap,
    Query(q): Query<PageQuery>,
) -> Response {
    let Some((_, info)) = session(&shared, &headers) else {
        return to_login();
    };
    let Some(connect) = &shared.connect else {
        return no_connector(&shared, Some(&info));
    };
    let accounts = match offered(connect).await {
        Ok(accounts) => accounts,
        Err(reason) => {
            return status_page(
                &shared,
                Some(&info),
                StatusCode::SERVICE_UNAVAILABLE,
                "The accounts cannot be listed",
                &reason,
            );
        }
    };
    let done = q
        .done
        .as_deref()
        .and_then(|id| connect.connects.result(id, &info.user));
    let body = pages::connect::page(&text(&shared), &info.csrf, &accounts, done.as_ref());
    let mut response = render(
        &shared,
        Some(&info),
        "/connect",
        "Connect an account",
        &body,
    )
    .into_response();
    if let Ok(csp) = HeaderValue::from_str(&form_targets(&accounts)) {
        response
            .headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    response
}

#[derive(Deserialize)]
pub(crate) struct StartForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    credential: String,
    #[serde(default)]
    subject: String,
}

/// `http(s)://<the host the browser asked>/connect/callback`, or `None` when the `Host`
/// header is missing or is not a plain `host[:port]`.
fn redirect_uri(shared: &Shared, headers: &HeaderMap) -> Option<String> {
    redirect_uri_for(shared.tls, headers)
}

fn redirect_uri_for(tls: bool, headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let plain = !host.is_empty()
        && host.len() <= 255
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    let scheme = if tls { "https" } else { "http" };
    plain.then(|| format!("{scheme}://{host}{CALLBACK_PATH}"))
}

/// A subject as a person typed it: trimmed, 1 to 128 printable characters.
fn subject(typed: &str) -> Option<String> {
    let s = typed.trim();
    let ok = !s.is_empty() && s.chars().count() <= 128 && !s.chars().any(char::is_control);
    ok.then(|| s.to_owned())
}

pub(crate) async fn start(
    State(shared): St,
    headers: HeaderMap,
    Form(form): Form<StartForm>,
) -> Response {
    let Some((session_id, info)) = session(&shared, &headers) else {
        return (
            StatusCode::UNAUTHORIZED,
            "log in first: nothing was started",
        )
            .into_response();
    };
    let Some(connect) = &shared.connect else {
        return no_connector(&shared, Some(&info));
    };
    let refuse = |status, heading: &str, text: &str| {
        status_page(&shared, Some(&info), status, heading, text)
    };
    if form.csrf.is_empty() || !same(&info.csrf, &form.csrf) {
        return refuse(
            StatusCode::FORBIDDEN,
            "The form expired",
            "This form did not carry this session's token, so nothing was started. Open the page again.",
        );
    }
    let accounts = match offered(connect).await {
        Ok(accounts) => accounts,
        Err(reason) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "The accounts cannot be listed",
                &reason,
            );
        }
    };
    let Some(account) = accounts.iter().find(|a| a.credential == form.credential) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "No such account",
            "This console offers no account of that name; nothing was started.",
        );
    };
    let subject = if account.per_subject {
        let Some(s) = subject(&form.subject) else {
            return refuse(
                StatusCode::BAD_REQUEST,
                "Whose account?",
                "This account is connected for each person: give the subject (1 to 128 printable characters). Nothing was started.",
            );
        };
        Some(s)
    } else {
        None
    };
    let Some(redirect_uri) = redirect_uri(&shared, &headers) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "No address to come back to",
            "The request named no plain host, so the provider could not be told where to send the browser back. Nothing was started.",
        );
    };
    let request = ConnectRequest::new(account.credential.clone(), subject.clone(), redirect_uri);
    let started = match connect.connector.0.start(request).await {
        Ok(started) => started,
        Err(failure) => {
            let body = pages::connect::failed(&text(&shared), &failure);
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                render(&shared, Some(&info), "/connect", "Not connected", &body),
            )
                .into_response();
        }
    };
    // The browser may go only where the page's CSP lets the form's redirect go.
    let location = HeaderValue::from_str(&started.authorization_url).ok();
    let (Some(location), true) = (
        location,
        origin(&started.authorization_url) == origin(&account.authorization_endpoint),
    ) else {
        return refuse(
            StatusCode::BAD_GATEWAY,
            "Not connected",
            "The connector's authorization URL is not at this account's authorization endpoint; nothing was started.",
        );
    };
    let (Some(suffix), Some(nonce)) = (random_hex(8), random_hex(32)) else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "Try again",
            "The random source failed; nothing was started.",
        );
    };
    let kept = connect.connects.keep(
        &started.state,
        InFlight::new(started.pending, session_id, suffix.clone(), nonce.clone()),
    );
    if !kept {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "Too many connects in progress",
            "Too many accounts are being connected right now; try again in a few minutes. Nothing was started.",
        );
    }
    tracing::info!(user = %info.user, credential = %account.credential, subject = subject.as_deref().unwrap_or(""), "console connect started");
    let binding = format!(
        "{BINDING_COOKIE}{suffix}={nonce}; Max-Age={}; {}",
        crate::connect::store::CONNECT_TTL.as_secs(),
        binding_attrs(&shared)
    );
    let mut response = StatusCode::SEE_OTHER.into_response();
    response.headers_mut().insert(header::LOCATION, location);
    if let Ok(v) = HeaderValue::from_str(&binding) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

/// The binding cookie's attributes ([`super::binding_attrs`] on the callback's path).
fn binding_attrs(shared: &Shared) -> String {
    super::binding_attrs(shared, CALLBACK_PATH)
}

pub(crate) async fn callback(
    State(shared): St,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let current = session(&shared, &headers).map(|(_, info)| info);
    let Some(connect) = &shared.connect else {
        return no_connector(&shared, current.as_ref());
    };
    let Some(state) = pairs.iter().find(|(k, _)| k == "state").map(|(_, v)| v) else {
        return status_page(
            &shared,
            current.as_ref(),
            StatusCode::BAD_REQUEST,
            "Not connected",
            "This address carries no connect state; nothing was stored. Start from \"Connect an account\".",
        );
    };
    let taken = connect.connects.take(state, |suffix| {
        cookie(&headers, &format!("{BINDING_COOKIE}{suffix}"))
    });
    let flight = match taken {
        Taken::Unknown => {
            return status_page(
                &shared,
                current.as_ref(),
                StatusCode::BAD_REQUEST,
                "Not connected",
                "This connect is unknown, expired or already finished; nothing was stored. Start again from \"Connect an account\".",
            );
        }
        Taken::OtherBrowser => {
            return status_page(
                &shared,
                current.as_ref(),
                StatusCode::FORBIDDEN,
                "Not connected",
                "This connect was started in another browser, or its cookie expired; nothing was stored. Start again from \"Connect an account\" in this browser.",
            );
        }
        Taken::Found(flight) => flight,
    };
    let clear = format!(
        "{BINDING_COOKIE}{}=; Max-Age=0; {}",
        flight.cookie,
        binding_attrs(&shared)
    );
    // Only for a person still signed in with the session that started it.
    let Some(info) = shared.sessions.get(&flight.session) else {
        return with_cookie(
            status_page(
                &shared,
                None,
                StatusCode::FORBIDDEN,
                "Not connected",
                "The console session that started this connect has ended; nothing was stored. Log in and start again.",
            ),
            &clear,
        );
    };
    let finished = connect
        .connector
        .0
        .finish(flight.pending, raw.as_deref().unwrap_or(""))
        .await;
    match finished {
        Ok(account) => {
            tracing::info!(user = %info.user, credential = %account.credential, subject = account.subject.as_deref().unwrap_or(""), "console connect finished");
            let Some(id) = random_hex(16) else {
                return with_cookie(
                    status_page(
                        &shared,
                        Some(&info),
                        StatusCode::OK,
                        "Connected",
                        "The account is connected.",
                    ),
                    &clear,
                );
            };
            connect.connects.finished(&id, &info.user, account);
            with_cookie(
                Redirect::to(&format!("/connect?done={id}")).into_response(),
                &clear,
            )
        }
        Err(failure) => {
            tracing::info!(user = %info.user, "console connect refused: nothing stored");
            let body = pages::connect::failed(&text(&shared), &failure);
            with_cookie(
                (
                    StatusCode::BAD_REQUEST,
                    render(&shared, Some(&info), "/connect", "Not connected", &body),
                )
                    .into_response(),
                &clear,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redirect_uri_takes_a_plain_host_only() {
        let shared = |host: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_str(host).expect("header"));
            headers
        };
        let uri = |host: &str, tls: bool| redirect_uri_for(tls, &shared(host));
        assert_eq!(
            uri("127.0.0.1:8640", false).as_deref(),
            Some("http://127.0.0.1:8640/connect/callback")
        );
        assert_eq!(
            uri("console.example.com", true).as_deref(),
            Some("https://console.example.com/connect/callback")
        );
        assert_eq!(
            uri("[::1]:8640", false).as_deref(),
            Some("http://[::1]:8640/connect/callback")
        );
        for bad in ["evil.example/x?", "user@evil.example", "a b", ""] {
            assert_eq!(uri(bad, false), None, "{bad}");
        }
        assert_eq!(redirect_uri_for(false, &HeaderMap::new()), None);
    }

    #[test]
    fn subjects_are_trimmed_printable_and_bounded() {
        assert_eq!(subject("  alice ").as_deref(), Some("alice"));
        assert_eq!(subject("   "), None);
        assert_eq!(subject("a\u{7}b"), None);
        assert_eq!(subject(&"x".repeat(129)), None);
        assert_eq!(
            subject(&"é".repeat(128)).map(|s| s.chars().count()),
            Some(128)
        );
    }
}
