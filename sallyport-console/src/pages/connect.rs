//! The "Connect an account" pages.

use maud::{Markup, html};

use crate::connect::{ConnectFailure, ConnectableAccount, ConnectedAccount};
use crate::render::{Text, countdown};

/// How many characters of a provider's error text are shown; the rest is counted.
const SHOWN_CHARS: usize = 300;

/// The connect page: a result just finished, then one form per account.
pub(crate) fn page(
    t: &Text,
    csrf: &str,
    accounts: &[ConnectableAccount],
    done: Option<&ConnectedAccount>,
) -> Markup {
    html! {
        h1 { "Connect an account" }
        @if let Some(done) = done {
            (connected(t, done))
        }
        p.hint {
            "Connecting sends you to the account's provider to sign in and grant access, then back here. "
            "The grant is kept in the vault; calls made for that person use it. No token is ever shown."
        }
        @if accounts.is_empty() {
            p.empty { "No account can be connected from this console." }
        }
        @for a in accounts {
            @let id = format!("connect-{}", a.credential);
            form.card.connect method="post" action="/connect" aria-labelledby=(id) {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="credential" value=(a.credential);
                h2 id=(id) { (t.show(&a.credential)) }
                p.hint {
                    @if a.per_subject { "Held for each person: one grant per subject." }
                    @else { "One grant, shared by every caller." }
                    " Scopes asked for: "
                    @if a.scopes.is_empty() { "the client's defaults" }
                    @for (i, s) in a.scopes.iter().enumerate() {
                        @if i > 0 { ", " }
                        code { (t.show(s)) }
                    }
                }
                @if a.per_subject {
                    @let field = format!("subject-{}", a.credential);
                    label for=(field) { "Subject (the person whose account this is)" }
                    input id=(field) type="text" name="subject" required maxlength="128" autocomplete="off";
                }
                div.buttons { button.approve type="submit" { "Connect" } }
            }
        }
    }
}

/// The result of a finished connect.
fn connected(t: &Text, a: &ConnectedAccount) -> Markup {
    let now = sallyport_core::clock::now_ms();
    html! {
        section.connected role="status" aria-label="Connected" {
            p.flash {
                "Connected " strong { (t.show(&a.credential)) }
                @if let Some(s) = &a.subject { " for " strong { (t.show(s)) } }
            }
            dl {
                dt { "Scopes granted" }
                dd {
                    @if a.scopes.is_empty() { "not stated by the provider" }
                    @for (i, s) in a.scopes.iter().enumerate() {
                        @if i > 0 { ", " }
                        code { (t.show(s)) }
                    }
                }
                dt { "Access token expires" }
                dd {
                    @if let Some(at) = a.expires_at_ms {
                        @let when = sallyport_core::clock::rfc3339(at);
                        time datetime=(when) { (when) } " (" (countdown(at, now)) "; refreshed when needed)"
                    } @else {
                        "not stated by the provider"
                    }
                }
            }
        }
    }
}

/// A connect that did not start or finish.
pub(crate) fn failed(t: &Text, f: &ConnectFailure) -> Markup {
    html! {
        h1 { "Not connected" }
        p.error role="alert" { (bounded(t, &f.reason)) }
        @if let Some((code, description)) = &f.provider_error {
            section aria-label="The provider's answer" {
                h2 { "The provider answered" }
                dl {
                    dt { "Error" } dd { code { (bounded(t, code)) } }
                    @if let Some(d) = description {
                        dt { "Description" } dd { (bounded(t, d)) }
                    }
                }
            }
        }
        p { "Nothing was stored. " a href="/connect" { "Back to Connect an account" } }
    }
}

/// `text` as it may be shown, at most [`SHOWN_CHARS`] characters, saying how many were cut.
fn bounded(t: &Text, text: &str) -> String {
    let shown = t.show(text);
    let total = shown.chars().count();
    if total <= SHOWN_CHARS {
        return shown;
    }
    let cut: String = shown.chars().take(SHOWN_CHARS).collect();
    format!("{cut}… ({} more characters not shown)", total - SHOWN_CHARS)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sallyport_core::scrub::Scrubber;

    use super::*;

    #[test]
    fn a_long_provider_text_is_cut_with_a_count_and_escaped() {
        let t = Text::new(Arc::new(Scrubber::new(["secret-canary-1234"])));
        let long = "x".repeat(350);
        assert_eq!(
            bounded(&t, &long),
            format!("{}… (50 more characters not shown)", "x".repeat(300))
        );
        assert_eq!(bounded(&t, "a\u{202e}b"), "a\\u{202e}b");
        assert_eq!(bounded(&t, "token secret-canary-1234"), "token [REDACTED]");
        let failure = ConnectFailure::new("The provider refused.")
            .with_provider_error("access_denied", Some("<script>alert(1)</script>".into()));
        let html = failed(&t, &failure).into_string();
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(!html.contains("<script>"), "{html}");
    }
}
