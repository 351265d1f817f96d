//! Credential binding checks and injection at dispatch.

use base64::Engine as _;
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use sallyport_core::code::RefusalCode;
use sallyport_core::outcome::Refusal;
use sallyport_core::vault::{ApiKeyPlacement, Credential, CredentialKind, CredentialMeta};
use url::Url;

use crate::config::BaseUrl;
use crate::request::RequestPlan;

fn unavailable(reason: String) -> Refusal {
    Refusal::new(RefusalCode::CredentialUnavailable, reason)
}

/// Where a credentialed call goes: the channel's base URL for the action if one is
/// configured, else the credential's single bound URL.
pub(crate) fn base_for(
    configured: Option<&BaseUrl>,
    meta: &CredentialMeta,
) -> Result<BaseUrl, Refusal> {
    if let Some(base) = configured {
        return Ok(base.clone());
    }
    match meta.binding.urls.as_slice() {
        [one] => BaseUrl::parse(one).map_err(|_| {
            unavailable(format!(
                "credential `{}` is bound to a URL the HTTP channel cannot use",
                meta.name
            ))
        }),
        [] => Err(unavailable(format!(
            "credential `{}` is not bound to any HTTP base URL",
            meta.name
        ))),
        _ => Err(unavailable(format!(
            "credential `{}` is bound to several base URLs; configure the HTTP channel's base URL for this action",
            meta.name
        ))),
    }
}

/// Whether `base` lies inside one of the credential's bound URLs: same scheme, host and
/// port, and the bound path is a prefix at a segment boundary.
pub(crate) fn binding_covers(meta: &CredentialMeta, base: &Url) -> bool {
    meta.binding.urls.iter().any(|bound| {
        let Ok(bound) = Url::parse(bound) else {
            return false;
        };
        if bound.scheme() != base.scheme()
            || bound.host_str().map(str::to_ascii_lowercase)
                != base.host_str().map(str::to_ascii_lowercase)
            || bound.port_or_known_default() != base.port_or_known_default()
        {
            return false;
        }
        let prefix = bound.path().trim_end_matches('/');
        let path = base.path();
        prefix.is_empty()
            || path == prefix
            || (path.starts_with(prefix) && path[prefix.len()..].starts_with('/'))
    })
}

/// Every check before a credential is attached: an HTTP kind, a binding that covers the
/// destination, no plain HTTP off loopback, and no template field in the credential's place.
pub(crate) fn check(
    meta: &CredentialMeta,
    base: &BaseUrl,
    plan: Option<&RequestPlan>,
) -> Result<(), Refusal> {
    match &meta.kind {
        CredentialKind::Bearer
        | CredentialKind::Basic { .. }
        | CredentialKind::ApiKey { .. }
        | CredentialKind::OAuthClientCredentials(_)
        | CredentialKind::OAuthRefresh(_)
        | CredentialKind::ClientCertificate(_) => {}
        _ => {
            return Err(unavailable(format!(
                "credential `{}` is not an HTTP credential (bearer, basic, API key, OAuth or client certificate)",
                meta.name
            )));
        }
    }
    if base.is_plain_http_off_loopback() {
        return Err(unavailable(format!(
            "credential `{}` would travel over plain HTTP; only HTTPS (or loopback) may carry credentials",
            meta.name
        )));
    }
    if !binding_covers(meta, base.as_url()) {
        return Err(unavailable(format!(
            "credential `{}` is not bound to this action's destination; refusing to attach it",
            meta.name
        )));
    }
    if let (CredentialKind::ApiKey { placement }, Some(plan)) = (&meta.kind, plan) {
        let clash = match placement {
            ApiKeyPlacement::Header(name) => plan
                .headers
                .iter()
                .any(|(h, _)| h.as_str().eq_ignore_ascii_case(name)),
            ApiKeyPlacement::Query(name) => plan.query.iter().any(|(q, _)| q == name),
        };
        if clash {
            return Err(Refusal::new(
                RefusalCode::InvalidRequest,
                format!(
                    "the request sets the parameter that carries credential `{}`",
                    meta.name
                ),
            ));
        }
    }
    Ok(())
}

/// The credential's binding covers the final URL of the request (base joined with the
/// path, dot segments resolved as the URL parser resolves them), not only its base.
pub(crate) fn check_destination(meta: &CredentialMeta, url: &Url) -> Result<(), Refusal> {
    if binding_covers(meta, url) {
        Ok(())
    } else {
        Err(unavailable(format!(
            "credential `{}` is not bound to the URL this request would go to; refusing to attach it",
            meta.name
        )))
    }
}

/// Header names the credential will occupy (refused in templates and builders).
pub(crate) fn owned_header(meta: &CredentialMeta) -> Option<HeaderName> {
    match &meta.kind {
        CredentialKind::ApiKey {
            placement: ApiKeyPlacement::Header(name),
        } => HeaderName::from_bytes(name.as_bytes()).ok(),
        _ => None,
    }
}

/// What the credential adds to each request.
pub(crate) enum Injection {
    Header(HeaderName, HeaderValue),
    Query(String, String),
    /// An OAuth access token, read (and refreshed) at each send, never at bind.
    AtSend,
    /// A TLS client certificate: presented in the handshake by the credential's own client
    /// ([`HttpChannel::client_for`](crate::HttpChannel)), nothing in the request itself.
    Handshake,
}

impl std::fmt::Debug for Injection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Header(name, _) => f.debug_tuple("Header").field(name).finish_non_exhaustive(),
            Self::Query(name, _) => f.debug_tuple("Query").field(name).finish_non_exhaustive(),
            Self::AtSend => f.write_str("AtSend"),
            Self::Handshake => f.write_str("Handshake"),
        }
    }
}

/// The header or query parameter the credential becomes. Header values are marked
/// sensitive (never printed by `Debug`, never indexed by HPACK).
pub(crate) fn injection(credential: &Credential) -> Result<Injection, Refusal> {
    let meta = credential.meta();
    let secret = credential.secret().expose();
    let bad_value = || {
        unavailable(format!(
            "credential `{}` holds a value that cannot be sent in a header",
            meta.name
        ))
    };
    let sensitive = |text: String| -> Result<HeaderValue, Refusal> {
        let mut value = HeaderValue::from_str(&text).map_err(|_| bad_value())?;
        value.set_sensitive(true);
        Ok(value)
    };
    match &meta.kind {
        CredentialKind::Bearer => Ok(Injection::Header(
            AUTHORIZATION,
            sensitive(format!("Bearer {secret}"))?,
        )),
        CredentialKind::Basic { user } => {
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{secret}"));
            Ok(Injection::Header(
                AUTHORIZATION,
                sensitive(format!("Basic {token}"))?,
            ))
        }
        CredentialKind::ApiKey {
            placement: ApiKeyPlacement::Header(name),
        } => {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad_value())?;
            Ok(Injection::Header(name, sensitive(secret.to_owned())?))
        }
        CredentialKind::ApiKey {
            placement: ApiKeyPlacement::Query(name),
        } => Ok(Injection::Query(name.clone(), secret.to_owned())),
        CredentialKind::OAuthClientCredentials(_) | CredentialKind::OAuthRefresh(_) => {
            if credential.grants().is_none() {
                return Err(unavailable(format!(
                    "credential `{}` is an OAuth credential, and its vault keeps no OAuth grants",
                    meta.name
                )));
            }
            Ok(Injection::AtSend)
        }
        CredentialKind::ClientCertificate(_) => Ok(Injection::Handshake),
        _ => Err(unavailable(format!(
            "credential `{}` is not an HTTP credential",
            meta.name
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sallyport_core::vault::Binding;

    fn meta(kind: CredentialKind, url: &str) -> CredentialMeta {
        CredentialMeta::new("api", kind, Binding::url(url))
    }

    #[test]
    fn the_binding_covers_same_origin_and_path_prefix_only() {
        let m = meta(CredentialKind::Bearer, "https://api.example.com/v1");
        let ok = |u: &str| binding_covers(&m, &Url::parse(u).unwrap());
        assert!(ok("https://api.example.com/v1"));
        assert!(ok("https://API.example.com:443/v1/projects"));
        assert!(!ok("https://api.example.com/v10"));
        assert!(!ok("http://api.example.com/v1"));
        assert!(!ok("https://api.example.com:8443/v1"));
        assert!(!ok("https://evil.example.com/v1"));
    }

    #[test]
    fn the_destination_check_sees_the_path_after_the_url_parser_resolved_it() {
        let m = meta(CredentialKind::Bearer, "https://api.example.com/v1");
        let base = BaseUrl::parse("https://api.example.com/v1").unwrap();
        assert!(check_destination(&m, &base.join("/projects/p1")).is_ok());
        for escaping in ["/../admin", "/%2e%2e/admin", "/.%2E/admin"] {
            let url = base.join(escaping);
            assert_eq!(url.path(), "/admin", "{escaping}");
            let err = check_destination(&m, &url).unwrap_err();
            assert_eq!(err.code, RefusalCode::CredentialUnavailable);
        }
    }

    #[test]
    fn plain_http_is_refused_for_credentials_except_loopback() {
        let m = meta(CredentialKind::Bearer, "http://10.0.0.5");
        let base = BaseUrl::parse("http://10.0.0.5").unwrap();
        let err = check(&m, &base, None).unwrap_err();
        assert_eq!(err.code, RefusalCode::CredentialUnavailable);
        assert!(err.reason.contains("plain HTTP"));
        let m = meta(CredentialKind::Bearer, "http://127.0.0.1:9");
        assert!(check(&m, &BaseUrl::parse("http://127.0.0.1:9").unwrap(), None).is_ok());
    }

    #[test]
    fn ssh_credentials_are_not_attached_to_http() {
        let m = meta(CredentialKind::SshPassword, "https://a.example");
        let err = check(&m, &BaseUrl::parse("https://a.example").unwrap(), None).unwrap_err();
        assert!(err.reason.contains("not an HTTP credential"));
    }
}
