use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Delete one repository.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "delete_repo", effect = observe, consent = none, retry = safe)]
#[http(delete = "/repos/{owner}/{repo}", result = ())]
struct DeleteRepo {
    owner: String,
    repo: String,
}

fn main() {}
