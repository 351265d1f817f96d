//! Consent per MCP connection: elicitation when the client can ask its user, the host's
//! provider otherwise, refusal when neither exists.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{Peer, RoleServer};
use sallyport_core::ConsentRule;
use sallyport_core::consent::{ConsentDecision, ConsentProvider, ConsentRequest};

/// A [`ConsentProvider`] that routes each request to the MCP connection of its session.
///
/// One MCP connection is one sallyport session. When the connection's client declared the
/// `elicitation` capability, the request is shown to its user through `elicitation/create`
/// (`accept` approves, `decline` and `cancel` deny). Otherwise the host's provider, if any,
/// is asked; with neither, the answer is [`ConsentDecision::Unavailable`] and the executor
/// refuses the call with `consent_unavailable`: consent fails closed.
///
/// Give the executor the router with
/// [`ExecutorBuilder::consent_arc`](sallyport_core::executor::ExecutorBuilder::consent_arc)
/// and the same router to [`McpServer::new`](crate::McpServer::new).
pub struct ConsentRouter {
    peers: RwLock<HashMap<String, Peer<RoleServer>>>,
    fallback: Option<Arc<dyn ConsentProvider>>,
    session_ttl: Duration,
}

impl std::fmt::Debug for ConsentRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsentRouter")
            .field("connections", &self.connections())
            .field("fallback", &self.fallback.is_some())
            .finish_non_exhaustive()
    }
}

impl ConsentRouter {
    /// A router with no host provider: clients that cannot elicit get `consent_unavailable`.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            peers: RwLock::new(HashMap::new()),
            fallback: None,
            session_ttl: Duration::from_secs(3600),
        })
    }

    /// A router that asks `provider` for sessions whose client cannot elicit.
    pub fn with_fallback(provider: Arc<dyn ConsentProvider>) -> Arc<Self> {
        Arc::new(Self {
            peers: RwLock::new(HashMap::new()),
            fallback: Some(provider),
            session_ttl: Duration::from_secs(3600),
        })
    }

    /// How many connections currently answer consent through elicitation.
    pub fn connections(&self) -> usize {
        self.peers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub(crate) fn register(&self, session_id: &str, peer: Peer<RoleServer>) {
        self.peers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session_id.to_owned(), peer);
    }

    pub(crate) fn unregister(&self, session_id: &str) {
        self.peers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(session_id);
    }

    fn peer(&self, session_id: &str) -> Option<Peer<RoleServer>> {
        self.peers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(session_id)
            .cloned()
    }
}

/// The text the client's user is shown.
fn message_of(request: &ConsentRequest) -> String {
    let mut text = format!(
        "An agent asks to run `{}` ({}, {}).\n{}\nRequest: {}\n",
        request.action,
        request.effect,
        request.externality.as_str(),
        request.summary,
        request.request
    );
    for object in &request.objects {
        text.push_str(&format!("Object: {} {}\n", object.kind, object.value));
    }
    if let Some(note) = &request.note {
        text.push_str(&format!("Agent's reason (unverified): {note}\n"));
    }
    text.push_str(match request.rule {
        ConsentRule::Session => {
            "Accept approves this action for the rest of this session; decline denies it."
        }
        _ => "Accept approves this one call; decline denies it.",
    });
    text
}

#[async_trait]
impl ConsentProvider for ConsentRouter {
    async fn ask(&self, request: &ConsentRequest) -> ConsentDecision {
        let Some(peer) = self.peer(&request.session_id) else {
            return match &self.fallback {
                Some(provider) => provider.ask(request).await,
                None => ConsentDecision::Unavailable,
            };
        };
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message_of(request),
            requested_schema: ElicitationSchema::builder().build_unchecked(),
        };
        match peer.create_elicitation(params).await {
            Ok(result) => match result.action {
                ElicitationAction::Accept => match request.rule {
                    ConsentRule::Session => ConsentDecision::ApproveForSession {
                        ttl: self.session_ttl,
                    },
                    _ => ConsentDecision::Approve,
                },
                ElicitationAction::Decline => ConsentDecision::Deny {
                    reason: Some("the user declined".to_owned()),
                },
                ElicitationAction::Cancel => ConsentDecision::Deny {
                    reason: Some("the user dismissed the request".to_owned()),
                },
                _ => ConsentDecision::Deny {
                    reason: Some("the user did not accept".to_owned()),
                },
            },
            Err(error) => {
                tracing::warn!(%error, action = %request.action, "elicitation failed");
                ConsentDecision::Unavailable
            }
        }
    }
}
