//! An `observe` action on a method meant to change state compiles with a reviewed
//! `method_override`, and the reason is on its card and in its spec (so in its definition).
#![deny(warnings)]

use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Search the issues of one repository.
#[derive(Action, Deserialize, JsonSchema)]
#[action(
    name = "search_issues",
    effect = observe,
    method_override = "the search endpoint takes its query as a POST body and changes nothing"
)]
#[http(post = "/search/issues", result = ())]
struct SearchIssues {
    q: String,
}

fn main() {
    let spec = SearchIssues::spec();
    assert_eq!(
        spec.method_override.as_deref(),
        Some("the search endpoint takes its query as a POST body and changes nothing")
    );
    assert_eq!(spec.check(), Ok(()));
    let card = spec.card();
    assert!(
        card.contains(
            "Method override: POST, declared observe: the search endpoint takes its query as a \
             POST body and changes nothing\n"
        ),
        "{card}"
    );
}
