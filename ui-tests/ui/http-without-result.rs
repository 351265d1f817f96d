use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Archive one project.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "archive_project", effect = reversible_change)]
#[http(post = "/v1/projects/{project_id}/archive")]
struct ArchiveProject {
    project_id: String,
}

fn main() {}
