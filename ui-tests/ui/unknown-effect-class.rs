use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Delete one repository.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "delete_repository", effect = destroy)]
struct DeleteRepository {
    repository: String,
}

fn main() {}
