use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Search the issues of one repository.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "search_issues", effect = observe, method_override = "")]
#[http(post = "/search/issues", result = ())]
struct SearchIssues {
    q: String,
}

fn main() {}
