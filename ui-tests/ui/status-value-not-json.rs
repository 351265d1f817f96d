use sallyport_core::Action;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether the pull request is merged.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Merged {
    merged: bool,
}

/// Tell whether one pull request is merged.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "check_if_merged", effect = observe)]
#[http(
    get = "/repos/{owner}/{repo}/pulls/{pull_number}/merge",
    status(404) = completed(value = "{merged: false}"),
    result = Merged
)]
struct CheckIfMerged {
    owner: String,
    repo: String,
    pull_number: u64,
}

fn main() {}
