use sallyport_core::Action;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether the pull request is merged.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Merged {
    merged: bool,
}

/// What `sallyport scaffold` writes when a 404's description reads like an answer.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "check_if_merged", effect = observe)]
#[http(
    get = "/repos/{owner}/{repo}/pulls/{pull_number}/merge",
    status(404) = choose,
    result = Merged
)]
struct CheckIfMerged {
    owner: String,
    repo: String,
    pull_number: u64,
}

fn main() {}
