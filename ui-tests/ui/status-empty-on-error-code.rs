use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Tell whether one pull request is merged.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "check_if_merged", effect = observe)]
#[http(
    get = "/repos/{owner}/{repo}/pulls/{pull_number}/merge",
    status(404) = completed(empty),
    result = ()
)]
struct CheckIfMerged {
    owner: String,
    repo: String,
    pull_number: u64,
}

fn main() {}
