//! Login attempts throttled per client.
//!
//! The rule: a client may fail to log in [`DEFAULT_LOGIN_FAILURES`] times within
//! [`DEFAULT_LOGIN_WINDOW`] (both set with
//! [`ConsoleBuilder::login_throttle`](crate::ConsoleBuilder::login_throttle)). Once it has,
//! every login attempt from it is refused without looking at the token (`429 Too Many
//! Requests`, with `Retry-After`) until its oldest failure in the window is older than the
//! window. A successful login clears the client's failures.
//!
//! A client is the address the TCP connection comes from, as [`Console::serve`] records it
//! (an IPv6 address counts by its /64 network, which one host usually holds whole). A
//! router mounted in a host's own server sees addresses only when that server is served
//! with `into_make_service_with_connect_info::<SocketAddr>()`; without them, and behind a
//! proxy, every client shares one budget. Forwarded headers are never trusted: any client
//! can write them.
//!
//! [`Console::serve`]: crate::Console::serve

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;

/// How many failed logins a client may make within [`DEFAULT_LOGIN_WINDOW`]: 5.
pub const DEFAULT_LOGIN_FAILURES: u32 = 5;

/// The window failed logins are counted in: 5 minutes.
pub const DEFAULT_LOGIN_WINDOW: Duration = Duration::from_secs(300);

/// The most clients remembered at once; past it, the one whose last failure is oldest is
/// forgotten.
const MAX_CLIENTS: usize = 4096;

/// Who is logging in, as far as the connection tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Client {
    /// An IPv4 address, or an IPv6 /64 network.
    Addr(IpAddr),
    /// The server did not record the connection's address.
    Unknown,
}

impl Client {
    fn of(addr: Option<SocketAddr>) -> Self {
        match addr.map(|a| a.ip()) {
            None => Self::Unknown,
            Some(IpAddr::V4(v4)) => Self::Addr(IpAddr::V4(v4)),
            Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::Addr(IpAddr::V4(v4)),
                None => {
                    let network = u128::from(v6) & !((1u128 << 64) - 1);
                    Self::Addr(IpAddr::V6(Ipv6Addr::from(network)))
                }
            },
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Client {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let addr = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(a)| *a);
        Ok(Self::of(addr))
    }
}

/// The failed logins of each client within the window.
pub(crate) struct LoginThrottle {
    limit: usize,
    window: Duration,
    failures: Mutex<HashMap<Client, VecDeque<Instant>>>,
}

impl LoginThrottle {
    /// `limit` failures per `window` (a limit of 0 is taken as 1).
    pub(crate) fn new(limit: u32, window: Duration) -> Self {
        Self {
            limit: usize::try_from(limit.max(1)).unwrap_or(usize::MAX),
            window,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// `Ok` when `client` may try a token now; otherwise how long until it may. A poisoned
    /// lock refuses (for a whole window): fail closed.
    pub(crate) fn check(&self, client: Client) -> Result<(), Duration> {
        let Ok(mut map) = self.failures.lock() else {
            return Err(self.window);
        };
        let now = Instant::now();
        let Some(times) = map.get_mut(&client) else {
            return Ok(());
        };
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.window)
        {
            times.pop_front();
        }
        if times.is_empty() {
            map.remove(&client);
            return Ok(());
        }
        if times.len() < self.limit {
            return Ok(());
        }
        let oldest = times.front().copied().unwrap_or(now);
        Err(self.window.saturating_sub(now.duration_since(oldest)))
    }

    /// Counts a failed login of `client`.
    pub(crate) fn failed(&self, client: Client) {
        let Ok(mut map) = self.failures.lock() else {
            return;
        };
        let now = Instant::now();
        if !map.contains_key(&client) && map.len() >= MAX_CLIENTS {
            let window = self.window;
            map.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < window)
            });
            if map.len() >= MAX_CLIENTS {
                let stalest = map
                    .iter()
                    .min_by_key(|(_, times)| times.back().copied())
                    .map(|(c, _)| *c);
                if let Some(stalest) = stalest {
                    map.remove(&stalest);
                }
            }
        }
        let times = map.entry(client).or_default();
        times.push_back(now);
        // Only the newest `limit` failures decide anything.
        while times.len() > self.limit {
            times.pop_front();
        }
    }

    /// A successful login: `client`'s failures are forgotten.
    pub(crate) fn succeeded(&self, client: Client) {
        if let Ok(mut map) = self.failures.lock() {
            map.remove(&client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(addr: &str) -> Client {
        Client::of(Some(addr.parse().expect("socket address")))
    }

    #[test]
    fn a_client_is_refused_after_the_limit_until_its_oldest_failure_ages_out() {
        let throttle = LoginThrottle::new(3, Duration::from_millis(300));
        let a = client("192.0.2.7:5000");
        for _ in 0..3 {
            assert_eq!(throttle.check(a), Ok(()));
            throttle.failed(a);
        }
        let wait = throttle.check(a).expect_err("throttled");
        assert!(wait <= Duration::from_millis(300), "{wait:?}");
        assert!(wait > Duration::ZERO, "{wait:?}");
        // Another client is not affected.
        assert_eq!(throttle.check(client("192.0.2.8:5000")), Ok(()));
        std::thread::sleep(Duration::from_millis(320));
        assert_eq!(throttle.check(a), Ok(()));
    }

    #[test]
    fn a_success_clears_the_failures() {
        let throttle = LoginThrottle::new(2, Duration::from_secs(60));
        let a = client("192.0.2.7:1");
        throttle.failed(a);
        throttle.succeeded(a);
        throttle.failed(a);
        assert_eq!(throttle.check(a), Ok(()));
        throttle.failed(a);
        assert!(throttle.check(a).is_err());
    }

    #[test]
    fn clients_are_addresses_ipv6_by_network_and_ports_do_not_count() {
        assert_eq!(client("192.0.2.7:1"), client("192.0.2.7:2"));
        assert_eq!(
            client("[2001:db8:1:2::1]:1"),
            client("[2001:db8:1:2:ffff::9]:2")
        );
        assert_ne!(client("[2001:db8:1:2::1]:1"), client("[2001:db8:1:3::1]:1"));
        assert_eq!(client("[::ffff:192.0.2.7]:1"), client("192.0.2.7:9"));
        assert_eq!(Client::of(None), Client::Unknown);
    }

    #[test]
    fn the_remembered_clients_are_bounded() {
        let throttle = LoginThrottle::new(1, Duration::from_secs(60));
        for i in 0..(MAX_CLIENTS + 10) {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000_u32 + u32::try_from(i).expect("small"));
            throttle.failed(Client::Addr(IpAddr::V4(ip)));
        }
        assert_eq!(throttle.failures.lock().expect("lock").len(), MAX_CLIENTS);
        // The newest is remembered (some older ones were forgotten to make room).
        let newest = std::net::Ipv4Addr::from(
            0x0a00_0000_u32 + u32::try_from(MAX_CLIENTS + 9).expect("small"),
        );
        assert!(throttle.check(Client::Addr(IpAddr::V4(newest))).is_err());
    }
}
