//! A conformance suite any [`GrantStore`] runs: the compare-and-set on a grant's version,
//! creating a subject's grant at version 0, `put`, `remove` and `list`, subjects kept apart,
//! no token in a summary or a `Debug`, the refresh hold, and the scopes a connected account
//! was granted.
//!
//! Each check is a public async function taking a [`GrantFixture`]: the store, a second,
//! independent handle on the same grants (another vault instance on the same file, another
//! pool on the same database), and the names the store takes. [`run_all`] runs them all,
//! one fresh fixture each, from a factory:
//!
//! ```no_run
//! # async fn demo() {
//! use std::sync::Arc;
//! use sallyport_core::vault::{
//!     Binding, CredentialKind, CredentialMeta, MemoryVault, OAuthClient, Secret, Vault,
//! };
//! use sallyport_testkit::grant_conformance::{self as suite, GrantFixture};
//!
//! suite::run_all(|| async {
//!     let vault = Arc::new(MemoryVault::new());
//!     for (name, client) in [
//!         ("github", OAuthClient::new("app", "https://login.example.com/token").per_subject()),
//!         ("service", OAuthClient::new("app", "https://login.example.com/token")),
//!     ] {
//!         vault.set(
//!             CredentialMeta::new(name, CredentialKind::OAuthRefresh(client), Binding::url("https://api.example.com")),
//!             Secret::new("client-secret"),
//!         );
//!     }
//!     let store = vault.grants().expect("the memory vault keeps grants");
//!     GrantFixture::new(Arc::clone(&store), store, "github", "service")
//!         .scrubber(move || vault.scrubber())
//! })
//! .await;
//! # }
//! ```
//!
//! A check that fails panics with what the store did wrong. The hold checks take threads of
//! their own and wait on them; run the suite on a multi-threaded runtime.

use std::future::Future;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use sallyport_core::scrub::Scrubber;
use sallyport_core::vault::{
    Grant, GrantKey, GrantStore, GrantUpdate, Replaced, Secret, VaultError,
};

/// What a check needs: the store, a second handle on the same grants, and the credentials
/// it takes. Built with [`GrantFixture::new`] and the `with`-style setters.
#[non_exhaustive]
pub struct GrantFixture {
    /// The store under test.
    pub store: Arc<dyn GrantStore>,
    /// An independent handle on the same grants (another vault instance on the same file,
    /// another pool on the same database); the store itself where there is no other.
    pub other: Arc<dyn GrantStore>,
    /// An OAuth credential held for each subject.
    pub per_subject: String,
    /// An OAuth credential with one shared grant.
    pub shared: String,
    /// The scopes `list` shows for grants of `per_subject`.
    pub scopes: Vec<String>,
    /// Whether the store refuses keys of credentials it does not hold (a vault's store)
    /// with `NotFound`; a store outside a vault takes any name.
    pub checks_credentials: bool,
    /// Whether [`GrantStore::hold_refresh`] holds against other processes (`None` from a
    /// store only one process uses).
    pub holds_across_processes: bool,
    /// The scrubber of the vault that hands the store out, to check it knows the tokens
    /// read from the store.
    pub scrubber: Option<Arc<dyn Fn() -> Arc<Scrubber> + Send + Sync>>,
}

impl std::fmt::Debug for GrantFixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantFixture")
            .field("store", &self.store)
            .field("per_subject", &self.per_subject)
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

impl GrantFixture {
    /// `store` and `other` (an independent handle on the same grants, or `store` again),
    /// taking grants of the per-subject credential `per_subject` and the shared credential
    /// `shared`. Defaults: no scopes, credentials checked, holds across processes, no
    /// scrubber.
    pub fn new(
        store: Arc<dyn GrantStore>,
        other: Arc<dyn GrantStore>,
        per_subject: impl Into<String>,
        shared: impl Into<String>,
    ) -> Self {
        Self {
            store,
            other,
            per_subject: per_subject.into(),
            shared: shared.into(),
            scopes: Vec::new(),
            checks_credentials: true,
            holds_across_processes: true,
            scrubber: None,
        }
    }

    /// The scopes `list` shows for the per-subject credential's grants.
    #[must_use]
    pub fn scopes(mut self, scopes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// The store takes any credential name (a store outside a vault).
    #[must_use]
    pub fn any_credential(mut self) -> Self {
        self.checks_credentials = false;
        self
    }

    /// The store is used by one process only: `hold_refresh` answers `None`.
    #[must_use]
    pub fn one_process(mut self) -> Self {
        self.holds_across_processes = false;
        self
    }

    /// The vault's scrubber, which must know every token read from the store.
    #[must_use]
    pub fn scrubber(
        mut self,
        scrubber: impl Fn() -> Arc<Scrubber> + Send + Sync + 'static,
    ) -> Self {
        self.scrubber = Some(Arc::new(scrubber));
        self
    }

    fn subject(&self, subject: &str) -> GrantKey {
        GrantKey::for_subject(self.per_subject.as_str(), subject)
    }
}

/// A token issued now, valid for a minute, with a rotated refresh token when given.
pub fn issued(access: &str, refresh: Option<&str>) -> GrantUpdate {
    let now = SystemTime::now();
    GrantUpdate::Issued {
        access_token: Secret::new(access),
        issued_at: now,
        expires_at: now + Duration::from_secs(60),
        refresh_token: refresh.map(Secret::new),
    }
}

/// A connected account: a refresh token, no access token yet.
pub fn connected(refresh: &str) -> GrantUpdate {
    GrantUpdate::Connected {
        refresh_token: Secret::new(refresh),
    }
}

fn access(grant: &Grant) -> Option<&str> {
    grant.access_token().map(Secret::expose)
}

fn refresh(grant: &Grant) -> Option<&str> {
    grant.refresh_token().map(Secret::expose)
}

/// A subject's grant that does not exist is `NotFound`; `replace` at version 0 creates it at
/// version 1; a second create at version 0 is `Changed` with the grant the first stored, and
/// stores nothing.
pub async fn version_zero_creates_a_subjects_grant_once(f: &GrantFixture) {
    let alice = f.subject("alice");
    assert!(
        matches!(f.store.current(&alice).await, Err(VaultError::NotFound(_))),
        "a subject without a grant is NotFound"
    );
    let stored = f
        .store
        .replace(&alice, 0, connected("rt-alice-1"))
        .await
        .expect("create at version 0");
    let Replaced::Stored(grant) = stored else {
        panic!("a create at version 0 of a missing grant is stored: {stored:?}");
    };
    assert_eq!(grant.version(), 1);
    assert_eq!(refresh(&grant), Some("rt-alice-1"));
    assert_eq!(access(&grant), None);
    let again = f
        .other
        .replace(&alice, 0, connected("rt-alice-other"))
        .await
        .expect("second create");
    match again {
        Replaced::Changed(current) => {
            assert_eq!(current.version(), 1);
            assert_eq!(refresh(&current), Some("rt-alice-1"));
        }
        Replaced::Stored(_) => panic!("a second create at version 0 must not be stored"),
        _ => panic!("unexpected answer: {again:?}"),
    }
    let now = f.store.current(&alice).await.expect("current");
    assert_eq!(
        (now.version(), refresh(&now)),
        (1, Some("rt-alice-1")),
        "the refused create stored nothing"
    );
}

/// A `replace` at a stale version is `Changed` with the grant as it is now, whichever
/// handle stored the newer one, and stores nothing; at the current version it is stored at
/// the next one.
pub async fn a_stale_version_is_changed_with_the_current_grant_and_stores_nothing(
    f: &GrantFixture,
) {
    let bob = f.subject("bob");
    let first = f.store.put(&bob, connected("rt-bob-1")).await.expect("put");
    assert_eq!(first.version(), 1);
    let Ok(Replaced::Stored(second)) = f
        .other
        .replace(&bob, 1, issued("at-bob-2", Some("rt-bob-2")))
        .await
    else {
        panic!("a replace at the current version is stored");
    };
    assert_eq!(second.version(), 2);
    assert_eq!(refresh(&second), Some("rt-bob-2"));
    let stale = f
        .store
        .replace(&bob, 1, issued("at-bob-stale", Some("rt-bob-stale")))
        .await
        .expect("stale replace");
    let Replaced::Changed(current) = stale else {
        panic!("a replace at a stale version is Changed: {stale:?}");
    };
    assert_eq!(current.version(), 2);
    assert_eq!(access(&current), Some("at-bob-2"));
    assert_eq!(refresh(&current), Some("rt-bob-2"));
    let now = f.other.current(&bob).await.expect("current");
    assert_eq!((now.version(), access(&now)), (2, Some("at-bob-2")));
    // A refresh without a new refresh token keeps the old one (the rule every store applies).
    let Ok(Replaced::Stored(third)) = f.store.replace(&bob, 2, issued("at-bob-3", None)).await
    else {
        panic!("a replace at the current version is stored");
    };
    assert_eq!(
        (third.version(), access(&third), refresh(&third)),
        (3, Some("at-bob-3"), Some("rt-bob-2"))
    );
}

/// A shared grant not stored yet is empty at version 0 (a subject's is `NotFound`), and
/// `replace` at version 0 stores its first tokens.
pub async fn a_shared_grant_starts_empty_at_version_zero(f: &GrantFixture) {
    let shared = GrantKey::shared(f.shared.as_str());
    let empty = f.store.current(&shared).await.expect("shared current");
    assert_eq!(empty.version(), 0);
    assert!(access(&empty).is_none() && refresh(&empty).is_none());
    let stored = f
        .store
        .replace(&shared, 0, issued("at-shared-1", None))
        .await
        .expect("first shared grant");
    assert!(matches!(stored, Replaced::Stored(ref g) if g.version() == 1));
    let seen = f.store.current(&shared).await.expect("current");
    assert_eq!((seen.version(), access(&seen)), (1, Some("at-shared-1")));
    // The other handle's compare-and-set sees it (its `current` may serve what it read
    // before: the file vault's does, and refreshes read under the hold).
    let late = f
        .other
        .replace(&shared, 0, issued("at-shared-late", None))
        .await
        .expect("second first grant");
    match late {
        Replaced::Changed(current) => {
            assert_eq!(
                (current.version(), access(&current)),
                (1, Some("at-shared-1"))
            );
        }
        other => panic!("a second create at version 0 is Changed: {other:?}"),
    }
}

/// `put` stores whatever the version: eight writers at once on two handles all succeed, and
/// the grant ends at version 8 with one of their tokens.
pub async fn put_stores_whatever_the_version_and_retries_a_lost_race(f: &GrantFixture) {
    let carol = f.subject("carol");
    let mut tasks = Vec::new();
    for n in 0..8 {
        let store = if n % 2 == 0 {
            Arc::clone(&f.store)
        } else {
            Arc::clone(&f.other)
        };
        let key = carol.clone();
        tasks.push(tokio::spawn(async move {
            store
                .put(
                    &key,
                    issued(&format!("at-carol-{n}"), Some(&format!("rt-carol-{n}"))),
                )
                .await
                .map(|g| g.version())
        }));
    }
    let mut versions = Vec::new();
    for task in tasks {
        versions.push(task.await.expect("task").expect("put"));
    }
    versions.sort_unstable();
    assert_eq!(
        versions,
        (1..=8).collect::<Vec<u64>>(),
        "each put stored one version"
    );
    // Read as every handle must see it (a handle's `current` may serve what it read before):
    // the listing, and a compare-and-set at version 8 that is stored.
    let listed = f.other.list(Some(&f.per_subject)).await.expect("list");
    let carol_now = listed
        .iter()
        .find(|s| s.subject.as_deref() == Some("carol"))
        .expect("carol's grant is listed");
    assert_eq!(carol_now.version, 8);
    match f
        .store
        .replace(&carol, 8, issued("at-carol-last", None))
        .await
        .expect("replace")
    {
        Replaced::Stored(last) => {
            assert_eq!(last.version(), 9);
            let kept = refresh(&last).expect("a refresh token");
            assert!(kept.starts_with("rt-carol-"), "one of the writers' tokens");
        }
        other => panic!("the grant is at version 8 for every handle: {other:?}"),
    }
}

/// `list` shows every grant, sorted by credential and subject (the shared one first), of
/// one credential when asked, with scopes, versions and expiry, and no token in its JSON or
/// `Debug`; `remove` takes one grant away (a second remove is `NotFound`).
pub async fn remove_and_list_show_no_token(f: &GrantFixture) {
    for subject in ["zoe", "dave", "erin"] {
        f.store
            .put(
                &f.subject(subject),
                issued(
                    &format!("at-canary-{subject}"),
                    Some(&format!("rt-canary-{subject}")),
                ),
            )
            .await
            .expect("put");
    }
    f.store
        .put(
            &GrantKey::shared(f.shared.as_str()),
            issued("at-canary-shared", None),
        )
        .await
        .expect("put shared");
    let all = f.other.list(None).await.expect("list");
    let keys: Vec<(String, Option<String>)> = all
        .iter()
        .map(|s| (s.credential.clone(), s.subject.clone()))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "sorted by credential and subject");
    assert_eq!(all.len(), 4, "{keys:?}");
    let mine = f.store.list(Some(&f.per_subject)).await.expect("list one");
    let subjects: Vec<Option<&str>> = mine.iter().map(|s| s.subject.as_deref()).collect();
    assert_eq!(subjects, [Some("dave"), Some("erin"), Some("zoe")]);
    for summary in &mine {
        assert_eq!(summary.credential, f.per_subject);
        assert_eq!(summary.scopes, f.scopes);
        assert_eq!(summary.version, 1);
        assert!(summary.refresh_token);
        assert!(summary.expires_at_ms.is_some_and(|ms| ms > 0));
        assert_eq!(summary.reconnect, None);
    }
    let json = serde_json::to_string(&all).expect("summaries serialize");
    let debug = format!("{all:?}");
    for text in [&json, &debug] {
        assert!(!text.contains("canary"), "a token in a summary: {text}");
    }
    f.store.remove(&f.subject("erin")).await.expect("remove");
    assert!(matches!(
        f.store.current(&f.subject("erin")).await,
        Err(VaultError::NotFound(_))
    ));
    assert!(matches!(
        f.store.remove(&f.subject("erin")).await,
        Err(VaultError::NotFound(_))
    ));
    let left: Vec<Option<String>> = f
        .other
        .list(Some(&f.per_subject))
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.subject)
        .collect();
    assert_eq!(left, [Some("dave".to_owned()), Some("zoe".to_owned())]);
    // The other grants are untouched.
    let zoe = f.store.current(&f.subject("zoe")).await.expect("zoe");
    assert_eq!(access(&zoe), Some("at-canary-zoe"));
}

/// An account connected through the authorization code flow
/// ([`GrantUpdate::Authorized`]) keeps the scopes the provider granted: read back through the
/// other handle, kept across a refresh, and listed as granted in place of the credential's
/// configured scopes; a grant stored without them lists the configured ones, not granted.
pub async fn the_scopes_granted_are_kept_and_listed(f: &GrantFixture) {
    let granted = vec!["granted:one".to_owned(), "granted:two".to_owned()];
    let alice = f.subject("alice");
    let now = SystemTime::now();
    let stored = f
        .store
        .replace(
            &alice,
            0,
            GrantUpdate::Authorized {
                refresh_token: Secret::new("rt-canary-authorized"),
                access_token: Secret::new("at-canary-authorized"),
                issued_at: now,
                expires_at: now + Duration::from_secs(60),
                scopes: granted.clone(),
            },
        )
        .await
        .expect("store the connected grant");
    assert!(matches!(stored, Replaced::Stored(_)), "{stored:?}");
    let read = f.other.current(&alice).await.expect("read back");
    assert_eq!(read.scopes(), Some(granted.as_slice()));
    assert_eq!(access(&read), Some("at-canary-authorized"));
    // A refresh keeps them.
    f.store
        .put(
            &alice,
            issued("at-canary-refreshed", Some("rt-canary-rotated")),
        )
        .await
        .expect("refresh");
    let refreshed = f.other.current(&alice).await.expect("read after refresh");
    assert_eq!(refreshed.scopes(), Some(granted.as_slice()));
    // A grant stored without them.
    f.store
        .put(&f.subject("bob"), connected("rt-canary-bob"))
        .await
        .expect("bob");
    let listed = f.other.list(Some(&f.per_subject)).await.expect("list");
    let by_subject: Vec<(Option<&str>, &[String], bool)> = listed
        .iter()
        .map(|s| (s.subject.as_deref(), s.scopes.as_slice(), s.scopes_granted))
        .collect();
    assert_eq!(
        by_subject,
        [
            (Some("alice"), granted.as_slice(), true),
            (Some("bob"), f.scopes.as_slice(), false),
        ]
    );
}

/// Sixteen subjects store and read at once, half through each handle: each reads back its
/// own tokens only, and a subject without a grant never gets another's. (A handle's
/// `current` may serve a grant it read before another handle changed it: what a refresh
/// needs is read under the hold or answered by the compare-and-set.)
pub async fn subjects_never_see_each_others_grants(f: &GrantFixture) {
    let mut tasks = Vec::new();
    for n in 0..16 {
        let store = if n % 2 == 0 {
            Arc::clone(&f.store)
        } else {
            Arc::clone(&f.other)
        };
        let reader = Arc::clone(&store);
        let key = f.subject(&format!("user-{n:02}"));
        tasks.push(tokio::spawn(async move {
            for round in 0..3 {
                let token = format!("at-user-{n:02}-{round}");
                store
                    .put(
                        &key,
                        issued(&token, Some(&format!("rt-user-{n:02}-{round}"))),
                    )
                    .await
                    .expect("put");
                let read = reader.current(&key).await.expect("current");
                // Only this task writes this subject's grant: the read is its own last write.
                assert_eq!(access(&read), Some(token.as_str()), "subject user-{n:02}");
            }
        }));
    }
    for task in tasks {
        task.await.expect("a subject read another's grant");
    }
    assert!(matches!(
        f.store.current(&f.subject("nobody")).await,
        Err(VaultError::NotFound(_))
    ));
    if f.checks_credentials {
        assert!(
            matches!(
                f.store
                    .current(&GrantKey::shared(f.per_subject.as_str()))
                    .await,
                Err(VaultError::NotFound(_))
            ),
            "a per-subject credential has no shared grant"
        );
        assert!(
            matches!(
                f.store
                    .current(&GrantKey::for_subject(f.shared.as_str(), "alice"))
                    .await,
                Err(VaultError::NotFound(_))
            ),
            "a shared credential has no subject's grant"
        );
        assert!(matches!(
            f.store
                .put(
                    &GrantKey::for_subject("no-such-credential", "alice"),
                    connected("rt")
                )
                .await,
            Err(VaultError::NotFound(_))
        ));
    }
}

/// The store, its grants and its answers print no token in `Debug`, and the vault's
/// scrubber (when given) knows the tokens read from the store and the ones they replaced.
pub async fn debug_shows_no_token_and_the_scrubber_knows_them(f: &GrantFixture) {
    let frank = f.subject("frank");
    let first = f
        .store
        .put(
            &frank,
            issued("at-canary-frank-1", Some("rt-canary-frank-1")),
        )
        .await
        .expect("put");
    let answer = f
        .store
        .replace(
            &frank,
            first.version(),
            issued("at-canary-frank-2", Some("rt-canary-frank-2")),
        )
        .await
        .expect("replace");
    let now = f.other.current(&frank).await.expect("current");
    let texts = [
        format!("{:?}", f.store),
        format!("{:?}", f.other),
        format!("{first:?}"),
        format!("{answer:?}"),
        format!("{now:?}"),
    ];
    for text in &texts {
        assert!(!text.contains("canary"), "a token in Debug: {text}");
    }
    if let Some(scrubber) = &f.scrubber {
        // Read through the store the vault hands out, so this process has seen them.
        let read = f.store.current(&frank).await.expect("current");
        assert_eq!(access(&read), Some("at-canary-frank-2"));
        let scrubber = scrubber();
        for token in [
            "at-canary-frank-2",
            "rt-canary-frank-2",
            "at-canary-frank-1",
            "rt-canary-frank-1",
        ] {
            assert!(
                scrubber.covers(token),
                "the vault's scrubber misses {token}"
            );
        }
    }
}

/// A refresh hold taken on a thread of its own: the answer (the version read under the
/// hold, `None` from a store that holds nothing), and the sender that lets it go.
struct HeldOnThread {
    taken: mpsc::Receiver<Result<Option<u64>, VaultError>>,
    release: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

/// Takes the refresh hold of `key` on `store` from a thread of its own; the hold lasts
/// until the thread is told to let go.
fn hold_on_thread(store: Arc<dyn GrantStore>, key: GrantKey) -> HeldOnThread {
    let (took, taken) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let thread = std::thread::spawn(move || match store.hold_refresh(&key) {
        Ok(Some((grant, hold))) => {
            let _ = took.send(Ok(Some(grant.version())));
            let _ = released.recv();
            drop(hold);
        }
        Ok(None) => {
            let _ = took.send(Ok(None));
        }
        Err(e) => {
            let _ = took.send(Err(e));
        }
    });
    HeldOnThread {
        taken,
        release,
        thread,
    }
}

/// The refresh hold of a grant excludes a second holder on the other handle until the
/// first lets go, and the second then reads, under its hold, what the first stored; another
/// subject's hold is not held up. A store one process uses answers `None`.
pub async fn a_refresh_hold_excludes_a_second_holder_until_it_lets_go(f: &GrantFixture) {
    let gina = f.subject("gina");
    f.store
        .put(&gina, connected("rt-gina-1"))
        .await
        .expect("put");
    let first = hold_on_thread(Arc::clone(&f.store), gina.clone());
    let got = first
        .taken
        .recv_timeout(Duration::from_secs(10))
        .expect("the first hold answers")
        .expect("the first hold is taken");
    if !f.holds_across_processes {
        assert_eq!(got, None, "a store of one process holds nothing");
        first.thread.join().expect("thread");
        return;
    }
    assert_eq!(got, Some(1), "the hold reads the grant under it");
    let second = hold_on_thread(Arc::clone(&f.other), gina.clone());
    assert!(
        matches!(
            second.taken.recv_timeout(Duration::from_millis(400)),
            Err(mpsc::RecvTimeoutError::Timeout)
        ),
        "a second holder got the hold while the first held it"
    );
    // Another subject refreshes meanwhile.
    let hank = f.subject("hank");
    f.other
        .put(&hank, connected("rt-hank-1"))
        .await
        .expect("put");
    let third = hold_on_thread(Arc::clone(&f.other), hank);
    assert_eq!(
        third
            .taken
            .recv_timeout(Duration::from_secs(10))
            .expect("another subject's hold is not held up")
            .expect("hold"),
        Some(1)
    );
    let _ = third.release.send(());
    // The first holder refreshes and lets go; the second reads the new grant under its hold.
    let Ok(Replaced::Stored(_)) = f
        .store
        .replace(&gina, 1, issued("at-gina-2", Some("rt-gina-2")))
        .await
    else {
        panic!("the holder stores its refresh");
    };
    let _ = first.release.send(());
    let got = second
        .taken
        .recv_timeout(Duration::from_secs(10))
        .expect("the second holder gets the hold once the first lets go")
        .expect("hold");
    assert_eq!(
        got,
        Some(2),
        "the second holder reads what the first stored"
    );
    let _ = second.release.send(());
    for held in [first, second, third] {
        held.thread.join().expect("thread");
    }
}

/// A process holding the refresh right of `key` (started by `spawn` with its stdout piped;
/// it prints a line starting with `held` once it holds it) excludes `store`'s hold until it is killed, and its death lets the hold
/// go: `store` then takes it within 10 seconds and reads the grant under it. Not part of
/// [`run_all`]: it needs a holder program of the backend's own (`sallyport-postgres`'s tests
/// use their `grant-holder`).
///
/// # Panics
///
/// When the child does not print `held` within 30 seconds, `store` gets the hold while the child holds it, or not
/// within 10 seconds of the child's death.
pub async fn a_holder_process_that_dies_lets_go(
    store: Arc<dyn GrantStore>,
    key: &GrantKey,
    spawn: impl FnOnce() -> std::process::Child,
) {
    use std::io::BufRead as _;
    let mut child = spawn();
    let stdout = child.stdout.take().expect("the holder's stdout is piped");
    let (said, heard) = mpsc::channel();
    std::thread::spawn(move || {
        let held = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.starts_with("held"));
        let _ = said.send(held);
    });
    let held = heard.recv_timeout(Duration::from_secs(30));
    if held != Ok(true) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the holder did not print `held` within 30 s ({held:?})");
    }
    let waiting = hold_on_thread(store, key.clone());
    assert!(
        matches!(
            waiting.taken.recv_timeout(Duration::from_millis(500)),
            Err(mpsc::RecvTimeoutError::Timeout)
        ),
        "the hold was taken while another process held it"
    );
    child.kill().expect("kill the holder");
    let _ = child.wait();
    let got = waiting
        .taken
        .recv_timeout(Duration::from_secs(10))
        .expect("the hold is let go when its process dies")
        .expect("hold");
    assert!(got.is_some(), "a store shared by processes holds");
    let _ = waiting.release.send(());
    waiting.thread.join().expect("thread");
}

/// Every check, each on a fresh fixture from `fixture`.
pub async fn run_all<F, Fut>(mut fixture: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = GrantFixture>,
{
    version_zero_creates_a_subjects_grant_once(&fixture().await).await;
    a_stale_version_is_changed_with_the_current_grant_and_stores_nothing(&fixture().await).await;
    a_shared_grant_starts_empty_at_version_zero(&fixture().await).await;
    put_stores_whatever_the_version_and_retries_a_lost_race(&fixture().await).await;
    remove_and_list_show_no_token(&fixture().await).await;
    subjects_never_see_each_others_grants(&fixture().await).await;
    debug_shows_no_token_and_the_scrubber_knows_them(&fixture().await).await;
    a_refresh_hold_excludes_a_second_holder_until_it_lets_go(&fixture().await).await;
    the_scopes_granted_are_kept_and_listed(&fixture().await).await;
}

/// How many checks [`run_all`] runs (one fixture each).
pub const CHECKS: usize = 9;
