//! The HTTP channel for sallyport: turns an authorized attempt into exactly one real HTTP
//! request — or a bounded, truthful series of them — and the answer into one of the five
//! statuses.
//!
//! # What it guarantees
//!
//! - **Requests come from the action's template** (`#[http(...)]`, i.e. an
//!   [`HttpTarget`](sallyport_core::target::HttpTarget)) or a hand-written
//!   [`BuildRequest`]; the agent never supplies a URL, a host, a header name or a raw body.
//!   The base URL comes from the channel's configuration or the credential's binding.
//! - **One request, built once** ([`Channel::prepare`](sallyport_core::Channel::prepare), with
//!   the credential bound before consent): the human approves the exact request, with the
//!   real host, and dispatch sends exactly it; a hand-written builder runs once per call.
//!   Every check is made there, before consent: path
//!   values are percent-encoded per segment, and values that would change the path (`/`,
//!   `..`, encoded variants), CR/LF in anything that becomes a header, headers the executor
//!   owns (`Authorization`, `Cookie`, `Host`, the idempotency header…), credentials bound
//!   elsewhere and credentials over plain HTTP off loopback are all refused with
//!   `invalid_request` or `credential_unavailable`.
//! - **Credentials are attached at dispatch** (bearer, basic, API key in a header or the
//!   query), marked sensitive; redirects are never followed; reqwest errors are logged only
//!   after `without_url()`; reasons are the channel's own sentences, never transport text.
//! - **Client certificates (mTLS)**: a `client_certificate` credential is presented in the
//!   TLS handshake with its bound base URLs (see [below](#client-certificates-mtls)), on
//!   clients of its own.
//! - **Counting is exact.** A request is counted (`DispatchContext::sending`) at the moment
//!   the connection takes it to write, so a refused connection, a DNS or TLS failure counts
//!   zero and the journal's count equals what the server saw. reqwest's own retries are
//!   disabled; hyper's only internal resend (a request that never started writing on a
//!   dead pooled connection) is, by that definition, never counted because it never left.
//! - **Bounded everything**: connect and total timeouts per action, a response-body cap
//!   (default 1 MiB) read incrementally, at most 5 requests per attempt (default 3).
//! - **Failure rules** (DESIGN.md): failures before send are resent for every effect class;
//!   after send, only `retry = idempotency_key` (same key, byte-identical payload) and
//!   observe actions resend (after a 408, a 5xx, a lost connection or a 429), anything else
//!   is `unknown` with the reconcile action named (a 429: `rejected`/`rate_limited` with the
//!   delay); a certificate the executor does not trust is `tls_untrusted`, nothing sent;
//!   401/403 stop and mark the credential unusable; 429 waits only for a valid
//!   `Retry-After` within the action's cap; the Idempotency-Key draft's 409/422/400 map to
//!   `pending`/`idempotency_conflict`, `rejected`/`idempotency_mismatch` and
//!   `rejected`/`idempotency_key_required`.
//! - **Responses** map per action (declared status codes, body predicates such as a
//!   `{"state":"rejected"}` inside a 200); nothing undeclared after send is `completed`;
//!   only the declared result type's fields reach the agent (a success body that names one of
//!   them twice does not match the result, `unexpected_response`, since parsers disagree on
//!   which of the two values wins); error bodies show at most a
//!   declared message field, filtered and truncated, plus a correlation id.
//!
//! # Example
//!
//! ```no_run
//! use sallyport_core::journal::SqliteJournal;
//! use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
//! use sallyport_core::{Action, Catalog, Executor, Session};
//! use sallyport_http::HttpChannel;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! /// Read one deployment's status.
//! #[derive(Action, Deserialize, JsonSchema)]
//! #[action(name = "get_deployment_status", effect = observe, credential = "deploy-api")]
//! #[http(get = "/v1/deployments/{deployment_id}", result = Deployment)]
//! struct GetDeploymentStatus {
//!     deployment_id: String,
//! }
//!
//! /// Queue one tested build for the preview environment.
//! #[derive(Action, Deserialize, JsonSchema)]
//! #[action(name = "create_preview_deployment", effect = external_commitment,
//!          retry = idempotency_key, reconcile = "get_deployment_status",
//!          credential = "deploy-api")]
//! #[http(post = "/v1/projects/{project_id}/deployments",
//!        status(202) = pending, status(409) = already_in_desired_state, result = Deployment)]
//! struct CreatePreviewDeployment {
//!     #[scope(project)]
//!     project_id: String,
//!     build_id: String,
//! }
//!
//! #[derive(Deserialize, Serialize, JsonSchema)]
//! struct Deployment {
//!     deployment_id: String,
//!     operation_status: String,
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let vault = MemoryVault::new();
//! vault.set(
//!     CredentialMeta::new("deploy-api", CredentialKind::Bearer,
//!                         Binding::url("https://deploy.example.com")),
//!     Secret::new("token-from-your-secret-store"),
//! );
//! let catalog = Catalog::builder()
//!     .action::<GetDeploymentStatus>()
//!     .action::<CreatePreviewDeployment>()
//!     .build()?;
//! let executor = Executor::builder(catalog)
//!     .journal(SqliteJournal::open("journal.db")?)
//!     .vault(vault)
//!     .channel(HttpChannel::builder().build()?) // base URL from the credential's binding
//!     .build()?;
//! let session = Session::new("chat-1").allow("project", ["proj_42"]);
//! let result = executor
//!     .call("create_preview_deployment",
//!           serde_json::json!({"project_id": "proj_42", "build_id": "build_7"}), &session)
//!     .await;
//! println!("{}", result.to_json()); // {"status":"pending", … "next":{"action":"get_deployment_status", …}}
//! # Ok(()) }
//! ```
//!
//! # Client certificates (mTLS)
//!
//! A credential of kind
//! [`ClientCertificate`](sallyport_core::vault::CredentialKind::ClientCertificate) holds a PEM
//! private key (PKCS#8, PKCS#1 or SEC1; RSA, ECDSA P-256/P-384 or Ed25519) as its secret and
//! the PEM certificate chain, leaf first, in its configuration. Bound to base URLs like any
//! HTTP credential, it is presented in the TLS handshake of the calls that bind it, and
//! nothing is added to the request itself.
//!
//! - Each such credential gets reqwest clients of its own, with their own connection pool and
//!   their own TLS session cache, built on the first call and kept until the credential
//!   changes (a new version or another value replaces them): a connection or a resumed TLS
//!   session that authenticated with one certificate never carries a call of another
//!   credential, or of none.
//! - A key that is not PEM, a chain that is not, a key type TLS cannot sign with, or a key
//!   that does not match the chain's first certificate: `rejected`/`credential_unavailable`
//!   before anything is sent. The parser's text is never passed on.
//! - The upstream refusing the certificate in the handshake (another CA, expired, revoked,
//!   or none presented where one is required) is `rejected`/`auth_failed`, and a refused
//!   certificate is marked unusable until it is replaced, as with a `401`. It is never
//!   `unknown`: with TLS 1.3 the client's side of the handshake ends before the server checks
//!   the certificate, so the request may already have been written (and counted as a
//!   dispatch), but a server that refuses the certificate reads none of it.
//! - The private key is a vault secret: never serialized, redacted in `Debug`, zeroized when
//!   dropped, and known to the scrubber whole and line by line. The DER copy decoded for TLS
//!   is zeroized once the signing key is loaded; the loaded key lives in rustls (ring) as
//!   long as the credential's clients.
//!
//! ```no_run
//! use sallyport_core::vault::{Binding, ClientCertificate, CredentialKind, CredentialMeta, FileVault, Secret, VaultAdmin};
//! # fn demo(vault: &FileVault) -> Result<(), Box<dyn std::error::Error>> {
//! vault.add(
//!     CredentialMeta::new(
//!         "payments-mtls",
//!         CredentialKind::ClientCertificate(ClientCertificate::new(
//!             std::fs::read_to_string("/etc/sallyport/payments-chain.pem")?,
//!         )),
//!         Binding::url("https://payments.internal.example.com"),
//!     ),
//!     Secret::new(std::fs::read_to_string("/etc/sallyport/payments-key.pem")?),
//! )?;
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! - `openapi` (off by default): attach the upstream's OpenAPI document
//!   (`HttpChannelBuilder::openapi`) and every request is checked against its operation before
//!   consent, with `sallyport-openapi` (which brings a YAML parser).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod channel;
mod config;
mod credential;
mod error;
mod exchange;
#[cfg(feature = "openapi")]
mod openapi;
mod permission;
mod prepared;
mod probe;
mod request;
mod response;

pub use crate::channel::{HttpChannel, HttpChannelBuilder, oauth};
pub use crate::config::{
    BaseUrl, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_RESPONSE_BYTES, HARD_MAX_ATTEMPTS, KeyQuoting,
};
pub use crate::error::{BuildError, ProbeError};
pub use crate::permission::HttpProbeRunner;
pub use crate::probe::{ProbeReport, ProbeVerdict, RepeatBehaviour};
pub use crate::request::{BuildRequest, HttpRequest, RequestParts};
