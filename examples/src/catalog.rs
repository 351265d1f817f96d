//! The demo catalog: five narrow actions over the demo upstream.

use sallyport_core::catalog::{Catalog, CatalogError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The credential every demo action uses.
pub const CREDENTIAL: &str = "demo-api";

/// List the builds of one project, newest first, with their test results.
#[derive(Debug, sallyport_core::Action, Deserialize, Serialize, JsonSchema)]
#[action(
    name = "list_builds",
    effect = observe,
    credential = "demo-api",
    scope = "One project.",
    returns = "Build ids, test results and commits."
)]
#[http(get = "/v1/projects/{project_id}/builds", result = BuildList)]
#[serde(deny_unknown_fields)]
pub struct ListBuilds {
    /// The project, e.g. `proj_42`.
    #[scope(project)]
    #[schemars(regex(pattern = r"^proj_[A-Za-z0-9]+$"))]
    pub project_id: String,
}

/// The builds of a project.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct BuildList {
    /// The builds.
    pub builds: Vec<Build>,
}

/// One build.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct Build {
    /// The build id.
    pub build_id: String,
    /// `passed` or `failed`.
    pub tests: String,
}

/// Read the status of one preview deployment.
#[derive(Debug, sallyport_core::Action, Deserialize, Serialize, JsonSchema)]
#[action(
    name = "get_deployment_status",
    effect = observe,
    credential = "demo-api",
    scope = "One project and one deployment ID.",
    returns = "The deployment's status and, once ready, its URL."
)]
#[http(
    get = "/v1/projects/{project_id}/deployments/{deployment_id}",
    result = DeploymentStatus
)]
#[serde(deny_unknown_fields)]
pub struct GetDeploymentStatus {
    /// The project.
    #[scope(project)]
    #[schemars(regex(pattern = r"^proj_[A-Za-z0-9]+$"))]
    pub project_id: String,
    /// The deployment, e.g. `dep_2388`.
    #[schemars(regex(pattern = r"^dep_[A-Za-z0-9]+$"))]
    pub deployment_id: String,
}

/// A deployment's status.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct DeploymentStatus {
    /// The deployment id.
    pub deployment_id: String,
    /// `queued`, `ready` or `exists`.
    pub operation_status: String,
    /// The preview URL, once ready.
    #[serde(default)]
    pub url: Option<String>,
}

/// Queue one tested build for the preview environment.
#[derive(Debug, sallyport_core::Action, Deserialize, Serialize, JsonSchema)]
#[action(
    name = "create_preview_deployment",
    effect = external_commitment,
    retry = idempotency_key,
    reconcile = "get_deployment_status",
    credential = "demo-api",
    scope = "One project and one build ID.",
    returns = "The deployment ID and its queue status; check it with get_deployment_status."
)]
#[http(
    post = "/v1/projects/{project_id}/deployments",
    status(202) = pending,
    status(409) = already_in_desired_state,
    result = DeploymentStatus
)]
#[serde(deny_unknown_fields)]
pub struct CreatePreviewDeployment {
    /// The project.
    #[scope(project)]
    #[schemars(regex(pattern = r"^proj_[A-Za-z0-9]+$"))]
    pub project_id: String,
    /// A build whose tests passed, e.g. `build_101`.
    #[schemars(regex(pattern = r"^build_[A-Za-z0-9]+$"))]
    pub build_id: String,
    /// Why the agent wants this; stored as an audit note and shown to the human, never sent.
    #[audit_note]
    #[schemars(length(min = 8, max = 240))]
    pub reason: String,
}

/// Issue one invoice to one customer. The server honours the idempotency key, so a lost
/// answer is resent with the same key and never bills twice.
#[derive(Debug, sallyport_core::Action, Deserialize, Serialize, JsonSchema)]
#[action(
    name = "create_invoice",
    effect = external_commitment,
    retry = idempotency_key,
    reconcile = "get_invoice",
    credential = "demo-api",
    data = [financial],
    scope = "One customer.",
    returns = "The invoice ID and its status."
)]
#[http(post = "/v1/invoices", result = Invoice, timeout = "400ms")]
#[serde(deny_unknown_fields)]
pub struct CreateInvoice {
    /// The customer, e.g. `cus_7`.
    #[scope(customer)]
    #[schemars(regex(pattern = r"^cus_[A-Za-z0-9]+$"))]
    pub customer_id: String,
    /// Amount in cents.
    #[schemars(range(min = 1, max = 1_000_000))]
    pub amount_cents: u64,
    /// The caller's reference for this invoice (used to find it again).
    #[schemars(regex(pattern = r"^[a-z0-9-]{3,40}$"))]
    pub reference: String,
    /// Why the agent wants this; stored as an audit note and shown to the human, never sent.
    #[audit_note]
    #[schemars(length(min = 8, max = 240))]
    pub reason: String,
}

/// An issued invoice.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct Invoice {
    /// The invoice id.
    pub invoice_id: String,
    /// `issued`.
    pub status: String,
}

/// Find the invoices of one customer with one reference (to check whether an invoice
/// exists after an uncertain call).
#[derive(Debug, sallyport_core::Action, Deserialize, Serialize, JsonSchema)]
#[action(
    name = "get_invoice",
    effect = observe,
    credential = "demo-api",
    data = [financial],
    scope = "One customer.",
    returns = "How many invoices carry the reference, and their IDs."
)]
#[http(get = "/v1/invoices", query(customer_id, reference), result = InvoiceMatches)]
#[serde(deny_unknown_fields)]
pub struct GetInvoice {
    /// The customer.
    #[scope(customer)]
    #[schemars(regex(pattern = r"^cus_[A-Za-z0-9]+$"))]
    pub customer_id: String,
    /// The reference given when the invoice was created.
    #[schemars(regex(pattern = r"^[a-z0-9-]{3,40}$"))]
    pub reference: String,
}

/// Invoices matching a reference.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct InvoiceMatches {
    /// How many.
    pub count: u64,
    /// Their ids.
    pub invoices: Vec<InvoiceRef>,
}

/// One invoice id.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct InvoiceRef {
    /// The invoice id.
    pub invoice_id: String,
}

/// The demo catalog. The audit notes are never sent upstream (the derive leaves an
/// `#[audit_note]` field out of every request), and invoice calls give up on a lost answer
/// after 400 ms (`timeout = "400ms"` on [`CreateInvoice`]).
///
/// # Errors
///
/// Never for this fixed catalog; the `Result` is the builder's.
pub fn demo_catalog() -> Result<Catalog, CatalogError> {
    Catalog::builder()
        .action::<ListBuilds>()
        .action::<GetDeploymentStatus>()
        .action::<CreatePreviewDeployment>()
        .action::<CreateInvoice>()
        .action::<GetInvoice>()
        .build()
}
