//! A TCP proxy in front of a PostgreSQL server that holds every chunk it forwards for a
//! fixed delay, in each direction: the database as if it were a network hop away (issue
//! 39's fleet benchmark, `journal-load … fleet`). Order is kept; nothing is dropped.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// Where the proxy sends what it accepts.
#[derive(Clone, Debug)]
enum Upstream {
    /// A Unix socket (`host=/dir port=P` → `/dir/.s.PGSQL.P`).
    Unix(String),
    /// A TCP address.
    Tcp(String),
}

/// A running proxy; stopped (with every connection through it) when dropped.
#[derive(Debug)]
pub struct DelayProxy {
    port: u16,
    /// The connection string given, without its host and port.
    rest: String,
    direct: String,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
}

/// The value of `key` in a libpq key-value string (a later key wins).
fn value<'a>(url: &'a str, key: &str) -> Option<&'a str> {
    url.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .next_back()
}

impl DelayProxy {
    /// Starts a proxy on 127.0.0.1 to the server `url` names (a libpq key-value string, as
    /// `sallyport_tests::postgres` makes), holding each chunk `delay` in each direction.
    ///
    /// # Panics
    ///
    /// When `url` is a `postgres://` URL, or the port cannot be bound.
    pub async fn start(url: &str, delay: Duration) -> Self {
        assert!(
            !url.contains("://"),
            "the delay proxy reads libpq key-value strings, not URLs: {url}"
        );
        let port = value(url, "port").unwrap_or("5432");
        let upstream = match value(url, "host").unwrap_or("/var/run/postgresql") {
            dir if dir.starts_with('/') => Upstream::Unix(format!("{dir}/.s.PGSQL.{port}")),
            host => Upstream::Tcp(format!("{host}:{port}")),
        };
        let rest: Vec<&str> = url
            .split_whitespace()
            .filter(|pair| !pair.starts_with("host=") && !pair.starts_with("port="))
            .collect();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let tasks = Arc::new(Mutex::new(Vec::new()));
        let accepting = tokio::spawn({
            let tasks = Arc::clone(&tasks);
            async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let handle = tokio::spawn(relay(client, upstream.clone(), delay));
                    tasks
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(handle.abort_handle());
                }
            }
        });
        tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(accepting.abort_handle());
        Self {
            port,
            rest: rest.join(" "),
            direct: url.to_owned(),
            tasks,
        }
    }

    /// The connection string through the proxy.
    pub fn url(&self) -> String {
        format!("host=127.0.0.1 port={} {}", self.port, self.rest)
    }

    /// The median of 200 `SELECT 1` round trips through the proxy, less the median of 200
    /// straight to the server: what the proxy adds to one round trip.
    pub async fn added_round_trip(&self) -> Duration {
        let median = |url: String| async move {
            let client = crate::postgres::client(&url).await;
            let mut times = Vec::with_capacity(200);
            for _ in 0..200 {
                let begun = Instant::now();
                client.simple_query("SELECT 1").await.expect("SELECT 1");
                times.push(begun.elapsed());
            }
            times.sort_unstable();
            times[times.len() / 2]
        };
        let through = median(self.url()).await;
        let direct = median(self.direct.clone()).await;
        through.saturating_sub(direct)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
    }
}

/// One connection: the upstream opened, then each direction pumped with the delay.
async fn relay(client: TcpStream, upstream: Upstream, delay: Duration) {
    let (client_read, client_write) = client.into_split();
    match upstream {
        Upstream::Unix(path) => {
            let Ok(server) = UnixStream::connect(&path).await else {
                return;
            };
            let (server_read, server_write) = server.into_split();
            tokio::join!(
                pump(client_read, server_write, delay),
                pump(server_read, client_write, delay)
            );
        }
        Upstream::Tcp(address) => {
            let Ok(server) = TcpStream::connect(&address).await else {
                return;
            };
            let _ = server.set_nodelay(true);
            let (server_read, server_write) = server.into_split();
            tokio::join!(
                pump(client_read, server_write, delay),
                pump(server_read, client_write, delay)
            );
        }
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read, in order.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin + Send + 'static,
    delay: Duration,
) {
    let (chunks, mut queued) = mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let due = tokio::time::Instant::now() + delay;
                if chunks.send((due, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        }
    }
    drop(chunks);
    let _ = writer.await;
}
