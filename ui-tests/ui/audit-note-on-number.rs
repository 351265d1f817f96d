use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Archive one project.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "archive_project", effect = reversible_change)]
struct ArchiveProject {
    project_id: String,
    #[audit_note]
    ticket: u32,
}

fn main() {}
