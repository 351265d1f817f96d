//! One request on the wire: counted at the moment bytes may leave, bounded in time, and
//! with a response body read incrementally up to a cap.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use sallyport_core::channel::{ChannelOutcome, DispatchContext, SendPermit};

/// Counts one request as sent the first time the HTTP connection takes it to write (hyper
/// asks the body whether it is empty, then polls it, only once a connection is ready and
/// the request head is about to be written). A request that never got a connection (DNS,
/// connect, TLS failure, or a pooled connection found dead before writing) is never counted,
/// so the journal's count equals what the server saw.
///
/// [`exchange`] asks the context for a [`SendPermit`] before the request goes to the client
/// (the vault still unlocked, the credential unchanged); the hook spends it when it fires.
pub(crate) struct SendHook {
    fired: AtomicBool,
    context: Option<Arc<DispatchContext>>,
    permit: Mutex<Option<SendPermit>>,
}

impl SendHook {
    pub(crate) fn new(context: Option<Arc<DispatchContext>>) -> Arc<Self> {
        Arc::new(Self {
            fired: AtomicBool::new(false),
            context,
            permit: Mutex::new(None),
        })
    }

    /// Asks for leave to send (a hook without a context, the probe's, needs none).
    async fn arm(&self) -> Result<(), ChannelOutcome> {
        let Some(context) = &self.context else {
            return Ok(());
        };
        let permit = context.permit().await?;
        *self.permit.lock().unwrap_or_else(PoisonError::into_inner) = Some(permit);
        Ok(())
    }

    fn fire(&self) {
        if !self.fired.swap(true, Ordering::SeqCst)
            && let Some(permit) = self
                .permit
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        {
            permit.sending();
        }
    }

    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

/// The request body: the exact bytes of the plan (shared, so every resend is
/// byte-identical), reporting the send to the hook.
pub(crate) struct HookedBody {
    data: Option<Bytes>,
    len: u64,
    hook: Arc<SendHook>,
}

impl HookedBody {
    pub(crate) fn new(data: Option<Bytes>, hook: Arc<SendHook>) -> Self {
        let data = data.filter(|d| !d.is_empty());
        let len = data.as_ref().map_or(0, |d| d.len() as u64);
        Self { data, len, hook }
    }
}

impl http_body::Body for HookedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.hook.fire();
        Poll::Ready(self.data.take().map(|d| Ok(Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        // The connection asks this right before it writes the request head.
        self.hook.fire();
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

/// What one exchange produced.
#[derive(Debug)]
pub(crate) enum Exchange {
    /// The request never left (no connection, or the timeout struck before it was written).
    NotSent { timed_out: bool },
    /// The TLS handshake refused the upstream's certificate; nothing was sent.
    Untrusted,
    /// The upstream refused this side's client certificate (or its absence) in the TLS
    /// handshake: it read no request, whether or not one was written.
    ClientCertificateRefused,
    /// It left, and no complete response came back.
    Lost {
        kind: LostKind,
        status: Option<StatusCode>,
    },
    /// A response (its body possibly over the cap).
    Answered(Answer),
    /// Nothing was sent: the vault was locked, or the credential replaced or removed, since
    /// the call resolved it. The outcome ends the dispatch unchanged.
    Refused(ChannelOutcome),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LostKind {
    /// No response (or no full body) within the total timeout.
    Timeout,
    /// The connection closed or reset before a full response.
    Connection,
}

#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Option<Bytes>,
}

impl Answer {
    pub(crate) fn too_large(&self) -> bool {
        self.body.is_none()
    }
}

enum Failure {
    Request,
    Untrusted,
    ClientCertificateRefused,
    Body(StatusCode),
}

/// Sends `request` once and reads the answer.
///
/// The send and the read are made into a boxed future of their own now, holding the
/// request (264 bytes), and polled only after leave to send: an `async fn` kept the request
/// as its argument for the whole exchange, beside the copy the send moved on, and its
/// future with the attempt loop around it was 1.7 KB, an allocation glibc serves from its
/// large bins. Apart, each is under 1 KB (`-Zprint-type-sizes`, release).
pub(crate) fn exchange<'a>(
    client: &'a reqwest::Client,
    request: reqwest::Request,
    hook: &'a SendHook,
    total: Duration,
    cap: u64,
) -> impl Future<Output = Exchange> + Send + 'a {
    let run = Box::pin(async move {
        let mut response = client.execute(request).await.map_err(|e| {
            let failure = if crate::error::is_untrusted_certificate(&e) {
                Failure::Untrusted
            } else if crate::error::is_client_certificate_refused(&e) {
                Failure::ClientCertificateRefused
            } else {
                Failure::Request
            };
            log_error(e);
            failure
        })?;
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        if response.content_length().is_some_and(|len| len > cap) {
            return Ok(Answer {
                status,
                headers,
                body: None,
            });
        }
        // A body that arrives in one chunk (the usual case) is kept as that chunk; only a
        // body in several is copied into one buffer.
        let mut first: Option<Bytes> = None;
        let mut joined = BytesMut::new();
        let mut len: u64 = 0;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    len += chunk.len() as u64;
                    if len > cap {
                        return Ok(Answer {
                            status,
                            headers,
                            body: None,
                        });
                    }
                    match first.take() {
                        None if joined.is_empty() => first = Some(chunk),
                        None => joined.extend_from_slice(&chunk),
                        Some(earlier) => {
                            joined.extend_from_slice(&earlier);
                            joined.extend_from_slice(&chunk);
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    log_error(e);
                    return Err(Failure::Body(status));
                }
            }
        }
        Ok(Answer {
            status,
            headers,
            body: Some(first.unwrap_or_else(|| joined.freeze())),
        })
    });
    async move {
        // Leave to send, immediately before the request goes to the client.
        if let Err(outcome) = hook.arm().await {
            return Exchange::Refused(outcome);
        }
        match tokio::time::timeout(total, run).await {
            Ok(Ok(answer)) => Exchange::Answered(answer),
            Ok(Err(Failure::Untrusted)) if !hook.fired() => Exchange::Untrusted,
            Ok(Err(Failure::ClientCertificateRefused)) => Exchange::ClientCertificateRefused,
            Ok(Err(Failure::Request)) if !hook.fired() => Exchange::NotSent { timed_out: false },
            Ok(Err(Failure::Request | Failure::Untrusted)) => Exchange::Lost {
                kind: LostKind::Connection,
                status: None,
            },
            Ok(Err(Failure::Body(status))) => Exchange::Lost {
                kind: LostKind::Connection,
                status: Some(status),
            },
            Err(_) if !hook.fired() => Exchange::NotSent { timed_out: true },
            Err(_) => Exchange::Lost {
                kind: LostKind::Timeout,
                status: None,
            },
        }
    }
}

/// Logs a transport error without its URL (which may carry an API key in the query).
fn log_error(error: reqwest::Error) {
    let kind = if error.is_connect() {
        "connect"
    } else if error.is_timeout() {
        "timeout"
    } else if error.is_body() || error.is_decode() {
        "body"
    } else {
        "request"
    };
    // `without_url` drops the URL; the source chain (hyper, io) names no URL or header.
    let error = error.without_url();
    tracing::debug!(kind, error = %error, "HTTP exchange failed");
}
