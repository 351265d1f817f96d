//! The connects in flight, kept server-side under their `state`, and the results shown once
//! they finished.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{ConnectedAccount, ErasedPending};
use crate::auth::same;

/// How many connects may be in flight at once (across every session).
pub(crate) const MAX_IN_FLIGHT: usize = 64;

/// How long a started connect waits for the browser to come back.
pub(crate) const CONNECT_TTL: Duration = Duration::from_secs(600);

/// A connect waiting for the provider's redirect.
pub(crate) struct InFlight {
    /// What the connector gets back.
    pub(crate) pending: ErasedPending,
    /// The console session that started it (its cookie value).
    pub(crate) session: String,
    /// The name suffix of the cookie that binds it to the browser that started it.
    pub(crate) cookie: String,
    /// That cookie's value.
    pub(crate) nonce: String,
    since: Instant,
}

impl InFlight {
    pub(crate) fn new(
        pending: ErasedPending,
        session: String,
        cookie: String,
        nonce: String,
    ) -> Self {
        Self {
            pending,
            session,
            cookie,
            nonce,
            since: Instant::now(),
        }
    }
}

/// What taking a connect by its `state` found.
pub(crate) enum Taken {
    /// No connect in flight has this state (never started, expired, or finished).
    Unknown,
    /// The request does not carry the cookie of the browser that started it: it stays.
    OtherBrowser,
    /// The connect, removed: it is finished at most once.
    Found(InFlight),
}

struct Done {
    user: String,
    account: ConnectedAccount,
    since: Instant,
}

/// The connects in flight and the finished ones' results, in memory.
pub(crate) struct Connects {
    ttl: Duration,
    in_flight: Mutex<HashMap<String, InFlight>>,
    done: Mutex<HashMap<String, Done>>,
}

impl Connects {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            in_flight: Mutex::new(HashMap::new()),
            done: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps `connect` under `state`; `false` (nothing kept) when [`MAX_IN_FLIGHT`] are in
    /// flight, the state is already taken, or the lock is poisoned.
    pub(crate) fn keep(&self, state: &str, connect: InFlight) -> bool {
        let Ok(mut map) = self.in_flight.lock() else {
            return false;
        };
        let ttl = self.ttl;
        map.retain(|_, c| c.since.elapsed() < ttl);
        if map.len() >= MAX_IN_FLIGHT || map.contains_key(state) {
            return false;
        }
        map.insert(state.to_owned(), connect);
        true
    }

    /// Takes the connect kept under `state` if `cookie` (the request's cookie of a given
    /// name) is the one it was bound to.
    pub(crate) fn take<'a>(&self, state: &str, cookie: impl Fn(&str) -> Option<&'a str>) -> Taken {
        // Fail closed: a poisoned map finishes nothing.
        let Ok(mut map) = self.in_flight.lock() else {
            return Taken::Unknown;
        };
        let ttl = self.ttl;
        map.retain(|_, c| c.since.elapsed() < ttl);
        let Some(connect) = map.get(state) else {
            return Taken::Unknown;
        };
        let bound = cookie(&connect.cookie).is_some_and(|value| same(value, &connect.nonce));
        if !bound {
            return Taken::OtherBrowser;
        }
        map.remove(state).map_or(Taken::Unknown, Taken::Found)
    }

    /// How many connects are in flight (expired ones not counted).
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.lock().map_or(0, |m| {
            m.values().filter(|c| c.since.elapsed() < self.ttl).count()
        })
    }

    /// Keeps a finished connect's result for `user` to read once, under `id`.
    pub(crate) fn finished(&self, id: &str, user: &str, account: ConnectedAccount) {
        if let Ok(mut map) = self.done.lock() {
            let ttl = self.ttl;
            map.retain(|_, d| d.since.elapsed() < ttl);
            if map.len() >= MAX_IN_FLIGHT {
                // The oldest result goes; its grant is stored either way.
                if let Some(oldest) = map
                    .iter()
                    .min_by_key(|(_, d)| d.since)
                    .map(|(k, _)| k.clone())
                {
                    map.remove(&oldest);
                }
            }
            map.insert(
                id.to_owned(),
                Done {
                    user: user.to_owned(),
                    account,
                    since: Instant::now(),
                },
            );
        }
    }

    /// The result kept under `id` for `user`, if any.
    pub(crate) fn result(&self, id: &str, user: &str) -> Option<ConnectedAccount> {
        let map = self.done.lock().ok()?;
        let done = map.get(id)?;
        (done.user == user && done.since.elapsed() < self.ttl).then(|| done.account.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flight(nonce: &str) -> InFlight {
        InFlight::new(Box::new(7u8), "session".into(), "c1".into(), nonce.into())
    }

    #[test]
    fn a_connect_is_taken_once_and_only_by_its_browser() {
        let connects = Connects::new(CONNECT_TTL);
        assert!(connects.keep("st-1", flight("n1")));
        assert!(!connects.keep("st-1", flight("n2")), "a state is kept once");
        assert!(matches!(
            connects.take("st-1", |_| None),
            Taken::OtherBrowser
        ));
        assert!(matches!(
            connects.take("st-1", |name| (name == "c1").then_some("n2")),
            Taken::OtherBrowser
        ));
        assert_eq!(
            connects.in_flight(),
            1,
            "a wrong browser leaves it in flight"
        );
        let Taken::Found(found) = connects.take("st-1", |name| (name == "c1").then_some("n1"))
        else {
            panic!("found");
        };
        assert_eq!(found.pending.downcast::<u8>().ok().map(|b| *b), Some(7));
        assert!(matches!(
            connects.take("st-1", |_| Some("n1")),
            Taken::Unknown
        ));
        assert!(matches!(
            connects.take("st-2", |_| Some("n1")),
            Taken::Unknown
        ));
    }

    #[test]
    fn connects_expire_and_are_bounded() {
        let connects = Connects::new(Duration::from_millis(40));
        assert!(connects.keep("old", flight("n")));
        std::thread::sleep(Duration::from_millis(60));
        assert!(matches!(
            connects.take("old", |_| Some("n")),
            Taken::Unknown
        ));
        let connects = Connects::new(CONNECT_TTL);
        for i in 0..MAX_IN_FLIGHT {
            assert!(connects.keep(&format!("s{i}"), flight("n")));
        }
        assert!(!connects.keep("one-more", flight("n")), "bounded");
        assert_eq!(connects.in_flight(), MAX_IN_FLIGHT);
    }

    #[test]
    fn a_result_is_shown_to_the_user_who_connected_only() {
        let connects = Connects::new(CONNECT_TTL);
        connects.finished(
            "r1",
            "alice",
            ConnectedAccount::new("github", Some("alice".into())),
        );
        assert_eq!(
            connects.result("r1", "alice").map(|a| a.credential),
            Some("github".to_owned())
        );
        assert!(connects.result("r1", "bob").is_none());
        assert!(connects.result("r2", "alice").is_none());
    }
}
