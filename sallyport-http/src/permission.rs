//! The HTTP runner for effective-permission probes.

use std::sync::Arc;

use async_trait::async_trait;
use reqwest::header::{ACCEPT, HeaderValue};
use sallyport_core::drift::probe::{
    PermissionProbe, ProbeEnvironment, ProbeMethod, ProbeObservation, ProbeRequest, ProbeRunner,
};
use sallyport_core::vault::Vault;

use crate::channel::HttpChannel;
use crate::credential::{self, Injection};

/// Largest probe body read to decide whether it is well formed.
const MAX_PROBE_BODY: usize = 256 * 1024;

/// Sends permission probes with the HTTP channel's client settings (no redirects, no
/// retries) and the probe's credential from the vault, to the channel's base URL or the
/// credential's bound URL. It reports only the status and whether the body was well-formed
/// JSON: a probe never moves data.
///
/// `environment` says whether the upstream is production; [`Prober`] skips production
/// runners unless told otherwise.
///
/// [`Prober`]: sallyport_core::drift::probe::Prober
#[derive(Clone)]
pub struct HttpProbeRunner {
    channel: HttpChannel,
    vault: Arc<dyn Vault>,
    environment: ProbeEnvironment,
}

impl HttpProbeRunner {
    /// A runner over `channel`, resolving probe credentials from `vault`.
    pub fn new(channel: HttpChannel, vault: Arc<dyn Vault>, environment: ProbeEnvironment) -> Self {
        Self {
            channel,
            vault,
            environment,
        }
    }
}

impl std::fmt::Debug for HttpProbeRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpProbeRunner")
            .field("channel", &self.channel)
            .field("environment", &self.environment)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ProbeRunner for HttpProbeRunner {
    fn environment(&self) -> ProbeEnvironment {
        self.environment
    }

    async fn run(&self, probe: &PermissionProbe) -> ProbeObservation {
        let transport = |detail: &str| ProbeObservation::TransportError {
            detail: detail.to_owned(),
        };
        let ProbeRequest::Http { method, path } = &probe.request else {
            return transport("not an HTTP probe");
        };
        let Ok(credential) = self.vault.resolve(&probe.credential).await else {
            return transport("the probe's credential is not available");
        };
        let Ok(base) = credential::base_for(self.channel.default_base(), credential.meta()) else {
            return transport("no base URL for the probe's credential");
        };
        if !credential::binding_covers(credential.meta(), base.as_url())
            || base.is_plain_http_off_loopback()
        {
            return transport("the probe's credential may not be sent to this base URL");
        }
        let Ok(injection) = credential::injection(&credential) else {
            return transport("the probe's credential cannot be attached");
        };
        let path = if path.starts_with('/') {
            path.clone()
        } else {
            format!("/{path}")
        };
        let mut url = base.join(&path);
        if let Injection::Query(k, v) = &injection {
            url.query_pairs_mut().append_pair(k, v);
        }
        let Ok(client) = self
            .channel
            .client_for(Some(&credential), self.channel.default_connect_timeout())
        else {
            return transport("the HTTP client could not be built");
        };
        let request = match method {
            ProbeMethod::Get => client.get(url),
            ProbeMethod::Head => client.head(url),
        };
        let mut request = request
            .header(ACCEPT, HeaderValue::from_static("application/json"))
            .timeout(self.channel.default_total_timeout());
        if let Injection::Header(name, value) = injection {
            request = request.header(name, value);
        }
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => return ProbeObservation::Timeout,
            Err(_) => return transport("the probe request failed in transport"),
        };
        let status = response.status().as_u16();
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > MAX_PROBE_BODY {
                        break;
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) if e.is_timeout() => return ProbeObservation::Timeout,
                Err(_) => return transport("the probe response was cut off"),
            }
        }
        let well_formed = match method {
            ProbeMethod::Head => body.is_empty(),
            ProbeMethod::Get => serde_json::from_slice::<serde_json::Value>(&body).is_ok(),
        };
        ProbeObservation::Response {
            status,
            well_formed,
        }
    }
}
