//! Effective permission probes: a credential can gain power while no definition changes.
//!
//! A credential (or one action) may declare a safe, read-only [`PermissionProbe`] that is
//! expected to be **denied**, e.g. reading an object of another tenant. A [`Prober`] runs the
//! probes through a [`ProbeRunner`] (the HTTP channel implements it), on demand
//! ([`Prober::run`]) or on a schedule ([`Prober::schedule`]). Only an accepted probe, a 2xx
//! with a well-formed body, is [`ProbeClass::EffectivePermissionExpansion`]: high severity,
//! and every action bound to that credential is quarantined through the
//! [`BaselineGuard`]. Denials, missing resources, rate limits, upstream
//! errors, malformed responses and network failures are never expansion.
//!
//! Probes are opt-in (nothing runs unless declared), skipped against a production runner
//! unless [`Prober::allow_production`] says otherwise, and each run is audited with one record
//! in the journal.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::BaselineGuard;
use crate::drift::DefinitionChange;
use crate::journal::{AttemptId, AuditEvent, Journal, Phase, ReceiptId};
use crate::outcome::{Origin, Status};
use sallyport_vocab::string_enum;

string_enum! {
    /// A read-only HTTP method a probe may use.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ProbeMethod {
        /// `GET`
        Get => "GET",
        /// `HEAD`
        Head => "HEAD",
    }
}

/// What a probe sends. Only read-only requests can be expressed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "channel", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProbeRequest {
    /// A read-only HTTP request to a path of the channel's base URL.
    Http {
        /// `GET` or `HEAD`.
        method: ProbeMethod,
        /// The path, e.g. `/v1/projects/proj_other_tenant`.
        path: String,
    },
}

impl ProbeRequest {
    /// `GET path`.
    pub fn get(path: impl Into<String>) -> Self {
        Self::Http {
            method: ProbeMethod::Get,
            path: path.into(),
        }
    }

    /// `HEAD path`.
    pub fn head(path: impl Into<String>) -> Self {
        Self::Http {
            method: ProbeMethod::Head,
            path: path.into(),
        }
    }

    /// `METHOD path`, for audit records.
    pub fn summary(&self) -> String {
        match self {
            Self::Http { method, path } => format!("{} {path}", method.as_str()),
        }
    }
}

/// A probe expected to be denied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PermissionProbe {
    /// A name for reports and audit records (`read_other_tenant_project`).
    pub name: String,
    /// The credential the probe uses; its actions are quarantined on expansion.
    pub credential: String,
    /// Further actions to quarantine on expansion (for a probe an action declares).
    pub actions: Vec<String>,
    /// What to send.
    pub request: ProbeRequest,
}

impl PermissionProbe {
    /// A probe of `credential`.
    pub fn for_credential(
        name: impl Into<String>,
        credential: impl Into<String>,
        request: ProbeRequest,
    ) -> Self {
        Self {
            name: name.into(),
            credential: credential.into(),
            actions: Vec::new(),
            request,
        }
    }

    /// Also quarantines `action` on expansion.
    #[must_use]
    pub fn with_action(mut self, action: impl Into<String>) -> Self {
        self.actions.push(action.into());
        self
    }
}

string_enum! {
    /// Where a runner sends its probes.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ProbeEnvironment {
        /// A production upstream: probes are skipped unless explicitly allowed.
        Production => "production",
        /// A staging, test or sandbox upstream.
        NonProduction => "non_production",
    }
}

/// What a runner saw. Never carries a body: probes must not move data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProbeObservation {
    /// The upstream answered.
    Response {
        /// The HTTP status.
        status: u16,
        /// Whether the body had the shape the resource has (parseable JSON for a JSON API; an
        /// empty body is well formed for `HEAD`).
        well_formed: bool,
    },
    /// The request timed out.
    Timeout,
    /// The request failed in transport (DNS, connect, TLS, reset).
    TransportError {
        /// A short description without secrets.
        detail: String,
    },
}

/// Sends probes. The HTTP channel implements it with the probe's credential.
#[async_trait]
pub trait ProbeRunner: Send + Sync + 'static {
    /// Where this runner's upstream is.
    fn environment(&self) -> ProbeEnvironment;

    /// Sends `probe.request` with `probe.credential`, once, without retries, and reports what
    /// came back.
    async fn run(&self, probe: &PermissionProbe) -> ProbeObservation;
}

string_enum! {
    /// The class of one probe result. Only [`ProbeClass::EffectivePermissionExpansion`] is a
    /// finding.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ProbeClass {
        /// 401 or 403: denied, as expected.
        Denied => "denied",
        /// A 2xx with a well-formed body: the credential can do what it should not.
        EffectivePermissionExpansion => "effective_permission_expansion",
        /// Any other status (1xx, 3xx, 400, 409, …): says nothing about the permission.
        Inconclusive => "inconclusive",
        /// A 2xx whose body is not what the resource looks like.
        Malformed => "malformed",
        /// A timeout or transport failure.
        NetworkFailure => "network_failure",
        /// 404 or 410: not visible to this credential.
        NotFound => "not_found",
        /// 429.
        RateLimited => "rate_limited",
        /// Not run: the runner's upstream is production and production probes are not allowed.
        Skipped => "skipped",
        /// 5xx.
        UpstreamError => "upstream_error",
    }
}

/// Classifies one observation. Only an accepted request with a well-formed answer is
/// expansion; everything that could be an error, a denial in disguise or noise is not.
pub fn classify(observation: &ProbeObservation) -> ProbeClass {
    match observation {
        ProbeObservation::Timeout | ProbeObservation::TransportError { .. } => {
            ProbeClass::NetworkFailure
        }
        ProbeObservation::Response {
            status,
            well_formed,
        } => match status {
            200..=299 if *well_formed => ProbeClass::EffectivePermissionExpansion,
            200..=299 => ProbeClass::Malformed,
            401 | 403 => ProbeClass::Denied,
            404 | 410 => ProbeClass::NotFound,
            429 => ProbeClass::RateLimited,
            500..=599 => ProbeClass::UpstreamError,
            _ => ProbeClass::Inconclusive,
        },
    }
}

/// The report of one probe run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProbeReport {
    /// The probe.
    pub probe: String,
    /// The credential.
    pub credential: String,
    /// What the runner saw (`None` when skipped).
    pub observation: Option<ProbeObservation>,
    /// The class.
    pub class: ProbeClass,
    /// The actions quarantined because of it (empty unless expansion).
    pub quarantined: Vec<String>,
    /// The audit record of the run.
    pub receipt_id: Option<ReceiptId>,
}

/// Runs declared probes, quarantines on expansion and audits every run.
pub struct Prober {
    probes: Vec<PermissionProbe>,
    runner: Arc<dyn ProbeRunner>,
    guard: Arc<BaselineGuard>,
    journal: Arc<dyn Journal>,
    allow_production: bool,
}

impl std::fmt::Debug for Prober {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prober")
            .field("probes", &self.probes.len())
            .field("allow_production", &self.allow_production)
            .finish_non_exhaustive()
    }
}

impl Prober {
    /// A prober of `probes` through `runner`; findings quarantine through `guard`, runs are
    /// audited in `journal`.
    pub fn new(
        probes: Vec<PermissionProbe>,
        runner: Arc<dyn ProbeRunner>,
        guard: Arc<BaselineGuard>,
        journal: Arc<dyn Journal>,
    ) -> Self {
        Self {
            probes,
            runner,
            guard,
            journal,
            allow_production: false,
        }
    }

    /// Also runs probes when the runner's upstream is production (off by default).
    #[must_use]
    pub fn allow_production(mut self) -> Self {
        self.allow_production = true;
        self
    }

    /// Runs every probe once, in order.
    pub async fn run(&self) -> Vec<ProbeReport> {
        let mut reports = Vec::with_capacity(self.probes.len());
        for probe in &self.probes {
            reports.push(self.run_one(probe).await);
        }
        reports
    }

    /// Runs every probe every `every` (the first run after one period) until the returned
    /// task is aborted. Needs a Tokio runtime.
    pub fn schedule(self: Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            // A slow run delays the next one instead of bursting to catch up.
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                self.run().await;
            }
        })
    }

    async fn run_one(&self, probe: &PermissionProbe) -> ProbeReport {
        let (observation, class) = if self.runner.environment() == ProbeEnvironment::Production
            && !self.allow_production
        {
            (None, ProbeClass::Skipped)
        } else {
            let observation = self.runner.run(probe).await;
            let class = classify(&observation);
            (Some(observation), class)
        };
        let mut quarantined = Vec::new();
        if class == ProbeClass::EffectivePermissionExpansion {
            let mut actions: Vec<String> = self
                .guard
                .catalog()
                .entries()
                .filter(|e| e.spec().credential.as_deref() == Some(probe.credential.as_str()))
                .map(|e| e.spec().name.to_string())
                .chain(probe.actions.iter().cloned())
                .collect();
            actions.sort();
            actions.dedup();
            let status = match &observation {
                Some(ProbeObservation::Response { status, .. }) => Value::from(*status),
                _ => Value::Null,
            };
            self.guard.record_permission_expansion(
                &probe.credential,
                actions.clone(),
                DefinitionChange {
                    field: format!("/effective_permissions/{}", probe.name),
                    before: Value::String("denied".to_owned()),
                    after: serde_json::json!({"accepted": true, "status": status}),
                },
            );
            quarantined = actions;
        }
        let receipt_id = self
            .audit(probe, observation.as_ref(), class, &quarantined)
            .await;
        ProbeReport {
            probe: probe.name.clone(),
            credential: probe.credential.clone(),
            observation,
            class,
            quarantined,
            receipt_id,
        }
    }

    async fn audit(
        &self,
        probe: &PermissionProbe,
        observation: Option<&ProbeObservation>,
        class: ProbeClass,
        quarantined: &[String],
    ) -> Option<ReceiptId> {
        let (status, reason) = match class {
            ProbeClass::EffectivePermissionExpansion => (
                Status::Completed,
                format!(
                    "probe expected to be denied was accepted; quarantined: {}",
                    quarantined.join(", ")
                ),
            ),
            ProbeClass::Skipped => (
                Status::Rejected,
                "not run: the upstream is production and production probes are not allowed"
                    .to_owned(),
            ),
            other => (
                Status::Rejected,
                format!("probe was not accepted ({})", other.as_str()),
            ),
        };
        let upstream_status = match observation {
            Some(ProbeObservation::Response { status, .. }) => Some(i64::from(*status)),
            _ => None,
        };
        let event = AuditEvent {
            receipt_id: ReceiptId::generate(),
            attempt_id: AttemptId::generate(),
            at: crate::clock::now(),
            session_id: "permission-probe".to_owned(),
            subject: None,
            action: format!("probe:{}", probe.name),
            definition_hash: None,
            phase: if class == ProbeClass::Skipped {
                Phase::Refused
            } else {
                Phase::Finished
            },
            status,
            origin: Some(if class == ProbeClass::Skipped {
                Origin::Executor
            } else {
                Origin::Upstream
            }),
            code: Some(class.as_str().into()),
            reason: Some(reason),
            objects: Vec::new(),
            note: None,
            request: Some(probe.request.summary()),
            consent: None,
            divergences: Vec::new(),
            drift_decision: None,
            dispatches: u32::from(observation.is_some()),
            upstream_status,
            approval: None,
            reconciled: None,
            policy: None,
            findings: Vec::new(),
            shadow: None,
            hooks: Vec::new(),
        };
        match self.journal.append(event).await {
            Ok(record) => Some(record.event.receipt_id),
            Err(e) => {
                tracing::error!(probe = %probe.name, error = %e, "audit append failed for a permission probe");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, well_formed: bool) -> ProbeObservation {
        ProbeObservation::Response {
            status,
            well_formed,
        }
    }

    #[test]
    fn only_an_accepted_well_formed_answer_is_expansion() {
        for status in 100..=599_u16 {
            for well_formed in [true, false] {
                let class = classify(&response(status, well_formed));
                let expected = match status {
                    200..=299 if well_formed => ProbeClass::EffectivePermissionExpansion,
                    200..=299 => ProbeClass::Malformed,
                    401 | 403 => ProbeClass::Denied,
                    404 | 410 => ProbeClass::NotFound,
                    429 => ProbeClass::RateLimited,
                    500..=599 => ProbeClass::UpstreamError,
                    _ => ProbeClass::Inconclusive,
                };
                assert_eq!(class, expected, "{status} well_formed={well_formed}");
            }
        }
        assert_eq!(
            classify(&ProbeObservation::Timeout),
            ProbeClass::NetworkFailure
        );
        assert_eq!(
            classify(&ProbeObservation::TransportError {
                detail: "connection refused".to_owned()
            }),
            ProbeClass::NetworkFailure
        );
    }

    #[test]
    fn named_non_expansions_are_never_expansion() {
        for (status, class) in [
            (401, ProbeClass::Denied),
            (403, ProbeClass::Denied),
            (404, ProbeClass::NotFound),
            (429, ProbeClass::RateLimited),
            (500, ProbeClass::UpstreamError),
            (502, ProbeClass::UpstreamError),
            (503, ProbeClass::UpstreamError),
            (200, ProbeClass::Malformed),
        ] {
            assert_eq!(classify(&response(status, status != 200)), class);
        }
    }
}
