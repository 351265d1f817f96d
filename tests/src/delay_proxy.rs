//! A TCP proxy in front of a PostgreSQL server that holds every chunk it forwards for a
//! fixed delay, in each direction: the database as if it were a network hop away (issue
//! 39's fleet benchmark, `journal-load … fleet`). Order is kept; nothing is dropped. A
//! connection's relay threads end when either side closes it (aborting the proxy's tasks
//! on drop stops accepting; the threads of open connections end with their connections).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::io::{Read, Write};

use tokio::net::{TcpListener, TcpStream};
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
    /// Chunks forwarded from clients to the server: a round trip starts with at least one.
    sent: Arc<AtomicU64>,
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
        let sent = Arc::new(AtomicU64::new(0));
        let accepting = tokio::spawn({
            let tasks = Arc::clone(&tasks);
            let sent = Arc::clone(&sent);
            async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let handle =
                        tokio::spawn(relay(client, upstream.clone(), delay, Arc::clone(&sent)));
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
            sent,
        }
    }

    /// Chunks forwarded from clients to the server so far (each flight of pipelined
    /// statements is one or a few; a round trip starts with at least one).
    pub fn chunks_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
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

/// One connection: the upstream opened, then each direction pumped with the delay on
/// threads of its own (blocking sockets and `std::thread::sleep`, whose wake-up is within
/// tens of microseconds, where a Tokio timer rounds up to the next millisecond tick).
async fn relay(client: TcpStream, upstream: Upstream, delay: Duration, sent: Arc<AtomicU64>) {
    let Ok(client) = client.into_std() else {
        return;
    };
    let _ = tokio::task::spawn_blocking(move || {
        let _ = client.set_nonblocking(false);
        match upstream {
            Upstream::Unix(path) => {
                if let Ok(server) = std::os::unix::net::UnixStream::connect(&path)
                    && let Ok(server_in) = server.try_clone()
                {
                    both_ways(client, server, server_in, delay, &sent);
                }
            }
            Upstream::Tcp(address) => {
                if let Ok(server) = std::net::TcpStream::connect(&address)
                    && let Ok(server_in) = server.try_clone()
                {
                    let _ = server.set_nodelay(true);
                    both_ways(client, server, server_in, delay, &sent);
                }
            }
        }
    })
    .await;
}

/// Pumps `client` to `server` (counting what it sends in `sent`) on a thread of its own and
/// `server_in` (a handle on the same server socket) back to `client` on this one, until both
/// directions end.
fn both_ways<S>(
    client: std::net::TcpStream,
    server: S,
    server_in: S,
    delay: Duration,
    sent: &Arc<AtomicU64>,
) where
    S: Read + Write + HalfClose + Send + 'static,
{
    let Ok(client_in) = client.try_clone() else {
        return;
    };
    let sent = Arc::clone(sent);
    let up = std::thread::spawn(move || pump(client_in, server, delay, Some(&sent)));
    pump(server_in, client, delay, None);
    let _ = up.join();
}

/// A socket the proxy can close its writing half of.
trait HalfClose {
    fn close_write(&self);
}

impl HalfClose for std::net::TcpStream {
    fn close_write(&self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
    }
}

impl HalfClose for std::os::unix::net::UnixStream {
    fn close_write(&self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read, in order: this
/// thread reads, a second one sleeps until each chunk is due and writes it.
fn pump(
    mut from: impl Read + Send + 'static,
    mut to: impl Write + HalfClose + Send + 'static,
    delay: Duration,
    counted: Option<&AtomicU64>,
) {
    let (chunks, queued) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = std::thread::spawn(move || {
        while let Ok((due, chunk)) = queued.recv() {
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        to.close_write();
    });
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(counted) = counted {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
                if chunks
                    .send((Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
                {
                    break;
                }
            }
        }
    }
    drop(chunks);
    let _ = writer.join();
}
