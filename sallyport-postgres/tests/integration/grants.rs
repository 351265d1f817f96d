//! The PostgreSQL grant store on a real server: the grant conformance suite (on its own and
//! behind a vault), what the table holds (no token bytes in any encoding), rows moved or
//! read with another key, key rotation, a holder process killed mid-hold, several refreshers
//! on two pools presenting every refresh token once, and the migration from schema 3.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use sallyport_core::journal::Journal;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, GrantKey, GrantStore, GrantUpdate, MemoryVault,
    OAuthClient, Replaced, Secret, Vault, VaultAdmin, VaultError,
};
use sallyport_postgres::{GrantKek, PgGrantStore, SCHEMA_VERSION};
use sallyport_testkit::grant_conformance::{self as suite, GrantFixture, connected, issued};
use sallyport_tests::postgres::{TestDb, event, intent};

fn kek(byte: u8) -> GrantKek {
    GrantKek::from_bytes([byte; 32])
}

async fn store(db: &TestDb, key: GrantKek) -> PgGrantStore {
    PgGrantStore::builder(&db.url, key)
        .scopes("github", ["repo", "read:user"])
        .connect()
        .await
        .expect("the grant store connects")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_grant_store_passes_the_whole_suite_on_two_pools() {
    let databases: Arc<Mutex<Vec<TestDb>>> = Arc::new(Mutex::new(Vec::new()));
    let held = Arc::clone(&databases);
    suite::run_all(move || {
        let held = Arc::clone(&held);
        async move {
            let db = TestDb::create().await;
            let one = store(&db, kek(1)).await;
            let two = store(&db, kek(1)).await;
            held.lock().expect("databases").push(db);
            GrantFixture::new(Arc::new(one), Arc::new(two), "github", "service")
                .scopes(["repo", "read:user"])
                .any_credential()
        }
    })
    .await;
    assert_eq!(databases.lock().expect("databases").len(), suite::CHECKS);
}

fn vault() -> MemoryVault {
    let vault = MemoryVault::new();
    let endpoint = "https://login.example.com/token";
    for meta in [
        CredentialMeta::new(
            "github",
            CredentialKind::OAuthRefresh(
                OAuthClient::new("webapp", endpoint)
                    .with_scopes(["repo", "read:user"])
                    .per_subject(),
            ),
            Binding::url("https://api.example.com"),
        ),
        CredentialMeta::new(
            "service",
            CredentialKind::OAuthClientCredentials(OAuthClient::new("daemon", endpoint)),
            Binding::url("https://api.example.com"),
        ),
    ] {
        VaultAdmin::add(&vault, meta, Secret::new("client-secret")).expect("add");
    }
    vault
}

/// Two vaults (as two processes) keep their grants in one database: the suite through the
/// stores they hand out, which check keys against the vault's credentials and whose
/// tokens the vault's scrubber knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vaults_keeping_their_grants_in_postgres_pass_the_whole_suite() {
    let databases: Arc<Mutex<Vec<TestDb>>> = Arc::new(Mutex::new(Vec::new()));
    let held = Arc::clone(&databases);
    suite::run_all(move || {
        let held = Arc::clone(&held);
        async move {
            let db = TestDb::create().await;
            // No scopes configured on the stores: the vault lists its credential's.
            let one = PgGrantStore::builder(&db.url, kek(2))
                .connect()
                .await
                .expect("one");
            let two = PgGrantStore::builder(&db.url, kek(2))
                .connect()
                .await
                .expect("two");
            held.lock().expect("databases").push(db);
            let first = Arc::new(vault().with_grant_store(Arc::new(one)));
            let second = vault().with_grant_store(Arc::new(two));
            let store = first.grants().expect("grants");
            let other = second.grants().expect("grants");
            GrantFixture::new(store, other, "github", "service")
                .scopes(["repo", "read:user"])
                .scrubber(move || first.scrubber())
        }
    })
    .await;
    assert_eq!(databases.lock().expect("databases").len(), suite::CHECKS);
}

/// Two file vaults on one file (as two processes) keep their grants in one database: the
/// suite through the stores they hand out, the file keeping the client secrets only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_vaults_keeping_their_grants_in_postgres_pass_the_whole_suite() {
    use sallyport_core::vault::FileVault;
    use sallyport_tests::vault_rig::{PASSPHRASE, fast_kdf};
    let held: Arc<Mutex<Vec<(TestDb, tempfile::TempDir)>>> = Arc::default();
    let keep = Arc::clone(&held);
    suite::run_all(move || {
        let keep = Arc::clone(&keep);
        async move {
            let db = TestDb::create().await;
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("vault.spv");
            let file = FileVault::create(&path, PASSPHRASE, fast_kdf()).expect("create");
            for meta in vault().list() {
                file.add(meta, Secret::new("client-secret")).expect("add");
            }
            let one = PgGrantStore::builder(&db.url, kek(15))
                .connect()
                .await
                .expect("one");
            let two = PgGrantStore::builder(&db.url, kek(15))
                .connect()
                .await
                .expect("two");
            let first = Arc::new(file.with_grant_store(Arc::new(one)));
            let second = FileVault::open(&path).with_grant_store(Arc::new(two));
            second.unlock(PASSPHRASE).expect("unlock");
            keep.lock().expect("held").push((db, dir));
            let store = first.grants().expect("grants");
            let other = second.grants().expect("grants");
            GrantFixture::new(store, other, "github", "service")
                .scopes(["repo", "read:user"])
                .scrubber(move || first.scrubber())
        }
    })
    .await;
    assert_eq!(held.lock().expect("held").len(), suite::CHECKS);
}

/// Every form of `token` a reader of the table might find it in.
fn encodings(token: &str) -> Vec<String> {
    let b = token.as_bytes();
    vec![
        token.to_owned(),
        hex::encode(b),
        hex::encode_upper(b),
        base64::engine::general_purpose::STANDARD.encode(b),
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(b),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b),
    ]
}

#[tokio::test]
async fn the_table_holds_no_token_in_any_encoding_and_lists_without_one() {
    let db = TestDb::create().await;
    let store = store(&db, kek(3)).await;
    let tokens = ["at-canary-Zq81xPw0", "rt-canary-Kb27mNv5"];
    let alice = GrantKey::for_subject("github", "alice");
    store
        .put(&alice, issued(tokens[0], Some(tokens[1])))
        .await
        .expect("put");
    store
        .put(
            &GrantKey::shared("service"),
            issued("at-canary-shared-Yt4", None),
        )
        .await
        .expect("put shared");
    let sql = db.sql().await;
    // Every column of every row as text (bytea as hex), and the raw bytes of the boxes.
    let dump: Vec<String> = sql
        .query("SELECT t::TEXT FROM sallyport_grants t", &[])
        .await
        .expect("dump")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(dump.len(), 2);
    let boxes: Vec<Vec<u8>> = sql
        .query("SELECT wrapped_key || payload FROM sallyport_grants", &[])
        .await
        .expect("boxes")
        .iter()
        .map(|r| r.get(0))
        .collect();
    for token in tokens.iter().chain(&["at-canary-shared-Yt4"]) {
        for form in encodings(token) {
            for row in &dump {
                assert!(!row.contains(&form), "`{form}` in a row: {row}");
            }
        }
        for bytes in &boxes {
            assert!(
                !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
                "a token's bytes in a box"
            );
        }
    }
    // What list shows, straight from the columns beside the boxes.
    let row = sql
        .query_one(
            "SELECT version, key_id, scopes, refresh_token, reconnect IS NULL,
                    expires_at_ms > 0
             FROM sallyport_grants WHERE credential = 'github' AND subject = 'alice'",
            &[],
        )
        .await
        .expect("row");
    assert_eq!(row.get::<_, i64>(0), 1);
    assert_eq!(row.get::<_, String>(1), kek(3).id());
    assert_eq!(row.get::<_, Vec<String>>(2), ["repo", "read:user"]);
    assert!(row.get::<_, bool>(3) && row.get::<_, bool>(4) && row.get::<_, bool>(5));
    let listed = store.list(None).await.expect("list");
    let text = format!(
        "{listed:?} {}",
        serde_json::to_string(&listed).expect("json")
    );
    assert!(!text.contains("canary"), "{text}");
    assert_eq!(
        listed
            .iter()
            .map(|s| s.credential.as_str())
            .collect::<Vec<_>>(),
        ["github", "service"]
    );
}

#[tokio::test]
async fn a_row_moved_to_another_subject_or_version_or_read_with_another_key_is_a_clear_error() {
    let db = TestDb::create().await;
    let store = store(&db, kek(4)).await;
    let alice = GrantKey::for_subject("github", "alice");
    let bob = GrantKey::for_subject("github", "bob");
    store
        .put(&alice, issued("at-alice", Some("rt-alice")))
        .await
        .expect("put");
    let sql = db.sql().await;
    // Alice's row copied to bob, as someone with write access to the table would.
    sql.execute(
        "INSERT INTO sallyport_grants
         SELECT credential, shared, 'bob', version, key_id, wrapped_key, payload, scopes,
                expires_at_ms, refresh_token, reconnect, updated_at
         FROM sallyport_grants WHERE subject = 'alice'",
        &[],
    )
    .await
    .expect("copy");
    let err = store
        .current(&bob)
        .await
        .expect_err("a moved row does not open");
    let text = err.to_string();
    assert!(matches!(err, VaultError::Backend(_)), "{err:?}");
    assert!(text.contains("does not authenticate"), "{text}");
    assert!(
        !text.contains("bob") && !text.contains("alice"),
        "no subject: {text}"
    );
    // A replace of bob's moved row fails the same way and changes nothing.
    assert!(store.replace(&bob, 1, issued("at-x", None)).await.is_err());
    // Alice's row with its version edited does not open either.
    sql.execute(
        "UPDATE sallyport_grants SET version = 7 WHERE subject = 'alice'",
        &[],
    )
    .await
    .expect("edit");
    let err = store.current(&alice).await.expect_err("an edited version");
    assert!(err.to_string().contains("does not authenticate"), "{err}");
    sql.execute(
        "UPDATE sallyport_grants SET version = 1 WHERE subject = 'alice'",
        &[],
    )
    .await
    .expect("restore");
    // Another key reads nothing, and says which key the row is under.
    let stranger = PgGrantStore::builder(&db.url, kek(5))
        .connect()
        .await
        .expect("connect");
    let err = stranger.current(&alice).await.expect_err("another key");
    let text = err.to_string();
    assert!(text.contains(kek(4).id()), "{text}");
    assert!(text.contains("does not hold"), "{text}");
    // The right key still reads it.
    let grant = store.current(&alice).await.expect("current");
    assert_eq!(grant.access_token().map(Secret::expose), Some("at-alice"));
}

#[tokio::test]
async fn rotating_the_key_rewraps_every_row_in_one_go_and_the_old_key_alone_reads_nothing() {
    let db = TestDb::create().await;
    let old = store(&db, kek(6)).await;
    for n in 0..5 {
        old.put(
            &GrantKey::for_subject("github", format!("user-{n}")),
            issued(&format!("at-{n}"), Some(&format!("rt-{n}"))),
        )
        .await
        .expect("put");
    }
    let sql = db.sql().await;
    let payloads_before: Vec<Vec<u8>> = sql
        .query("SELECT payload FROM sallyport_grants ORDER BY subject", &[])
        .await
        .expect("payloads")
        .iter()
        .map(|r| r.get(0))
        .collect();
    // A store that reads with the new key only, before the rotation: a clear error.
    let new_only = PgGrantStore::builder(&db.url, kek(7))
        .connect()
        .await
        .expect("new");
    let user0 = GrantKey::for_subject("github", "user-0");
    assert!(matches!(
        new_only.current(&user0).await,
        Err(VaultError::Backend(_))
    ));

    assert_eq!(old.rotate_key(kek(7)).await.expect("rotate"), 5);
    assert_eq!(old.key_id(), kek(7).id());
    let ids: Vec<String> = sql
        .query("SELECT DISTINCT key_id FROM sallyport_grants", &[])
        .await
        .expect("ids")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, [kek(7).id().to_owned()]);
    let payloads_after: Vec<Vec<u8>> = sql
        .query("SELECT payload FROM sallyport_grants ORDER BY subject", &[])
        .await
        .expect("payloads")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        payloads_before, payloads_after,
        "only the data keys were re-wrapped"
    );
    for n in 0..5 {
        let key = GrantKey::for_subject("github", format!("user-{n}"));
        let grant = new_only
            .current(&key)
            .await
            .expect("the new key reads every row");
        assert_eq!(
            grant.refresh_token().map(Secret::expose),
            Some(format!("rt-{n}").as_str())
        );
    }
    let old_only = PgGrantStore::builder(&db.url, kek(6))
        .connect()
        .await
        .expect("old");
    let err = old_only
        .current(&user0)
        .await
        .expect_err("the old key alone");
    assert!(err.to_string().contains(kek(7).id()), "{err}");
    // The old key as a previous key reads rows another process wrote under it meanwhile.
    let straggler = PgGrantStore::builder(&db.url, kek(6))
        .connect()
        .await
        .expect("old");
    straggler
        .put(
            &GrantKey::for_subject("github", "late"),
            connected("rt-late"),
        )
        .await
        .expect("a process with the old key writes");
    let mixed = PgGrantStore::builder(&db.url, kek(7))
        .previous_key(kek(6))
        .connect()
        .await
        .expect("mixed");
    let late = GrantKey::for_subject("github", "late");
    assert!(mixed.current(&late).await.is_ok());
    assert!(mixed.current(&user0).await.is_ok());
    // Rotating again moves it too; a row under a key nobody holds stops a rotation whole.
    assert_eq!(mixed.rotate_key(kek(8)).await.expect("rotate"), 6);
    let stuck = PgGrantStore::builder(&db.url, kek(9))
        .connect()
        .await
        .expect("stuck");
    let err = stuck
        .rotate_key(kek(10))
        .await
        .expect_err("rows under an unknown key");
    assert!(err.to_string().contains(kek(8).id()), "{err}");
    let ids: Vec<String> = sql
        .query("SELECT DISTINCT key_id FROM sallyport_grants", &[])
        .await
        .expect("ids")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        ids,
        [kek(8).id().to_owned()],
        "the failed rotation changed nothing"
    );
}

/// Takes the hold of `key` on a blocking thread; `Some(version)` once held, within `wait`.
async fn try_hold(
    store: &Arc<PgGrantStore>,
    key: &GrantKey,
    wait: Duration,
) -> Option<(u64, sallyport_core::vault::RefreshHold)> {
    let (store, key) = (Arc::clone(store), key.clone());
    let task = tokio::task::spawn_blocking(move || store.hold_refresh(&key));
    match tokio::time::timeout(wait, task).await {
        Ok(joined) => {
            let (grant, hold) = joined
                .expect("join")
                .expect("hold")
                .expect("a PostgreSQL hold");
            Some((grant.version(), hold))
        }
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_process_killed_mid_hold_lets_go_and_the_next_holder_reads_the_grant() {
    let db = TestDb::create().await;
    let key = kek(11);
    let store = Arc::new(store(&db, key.clone()).await);
    let alice = GrantKey::for_subject("github", "alice");
    store
        .put(&alice, connected("rt-alice-1"))
        .await
        .expect("put");
    let url = db.url.clone();
    suite::a_holder_process_that_dies_lets_go(store, &alice, move || {
        Command::new(env!("CARGO_BIN_EXE_grant-holder"))
            .args([url.as_str(), key.to_secret().expose(), "github", "alice"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn grant-holder")
    })
    .await;
}

/// A holder that never lets go (a process stopped mid-refresh; here one that sleeps while it
/// holds) makes the next refresh wait `refresh_wait` and no longer: its hold is refused,
/// saying why, so the call that needed a token is answered instead of hanging. Once the
/// holder is gone, the next hold is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_kept_by_another_process_is_waited_for_as_long_as_refresh_wait() {
    use std::io::BufRead as _;
    let db = TestDb::create().await;
    let key = kek(14);
    let alice = GrantKey::for_subject("github", "alice");
    let store = Arc::new(
        PgGrantStore::builder(&db.url, key.clone())
            .refresh_wait(Duration::from_millis(1500))
            .connect()
            .await
            .expect("the grant store connects"),
    );
    store.put(&alice, connected("rt-1")).await.expect("put");
    let mut holder = Command::new(env!("CARGO_BIN_EXE_grant-holder"))
        .args([db.url.as_str(), key.to_secret().expose(), "github", "alice"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn grant-holder");
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the holder's line");
    assert!(line.starts_with("held "), "{line}");

    let started = std::time::Instant::now();
    let (waiting, waited_key) = (Arc::clone(&store), alice.clone());
    let refused = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::task::spawn_blocking(move || waiting.hold_refresh(&waited_key).map(drop)),
    )
    .await
    .expect("the hold is refused in time, not waited for as long as the holder holds")
    .expect("join");
    let waited = started.elapsed();
    let Err(VaultError::Backend(reason)) = refused else {
        panic!("the hold was not refused: {refused:?}");
    };
    assert!(reason.contains("for over 1500 ms"), "{reason}");
    assert!(!reason.contains("rt-1"), "{reason}");
    assert!(
        waited >= Duration::from_millis(1400) && waited < Duration::from_secs(10),
        "{waited:?}"
    );

    holder.kill().expect("kill");
    holder.wait().expect("reaped");
    assert!(
        try_hold(&store, &alice, Duration::from_secs(10))
            .await
            .is_some(),
        "the hold is taken once the holder is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_hold_lets_go_and_holds_of_other_subjects_do_not_wait() {
    let db = TestDb::create().await;
    let store = Arc::new(store(&db, kek(12)).await);
    let alice = GrantKey::for_subject("github", "alice");
    let bob = GrantKey::for_subject("github", "bob");
    store.put(&alice, connected("rt-a")).await.expect("put");
    store.put(&bob, connected("rt-b")).await.expect("put");
    let (_, held) = try_hold(&store, &alice, Duration::from_secs(5))
        .await
        .expect("held");
    assert!(
        try_hold(&store, &alice, Duration::from_millis(300))
            .await
            .is_none()
    );
    assert!(
        try_hold(&store, &bob, Duration::from_secs(5))
            .await
            .is_some()
    );
    drop(held);
    assert!(
        try_hold(&store, &alice, Duration::from_secs(5))
            .await
            .is_some()
    );
}

/// Eight refreshers, four on each of two stores with pools of their own, refresh one
/// subject's grant 5 times each the way the HTTP channel does (hold, read, present the
/// refresh token, store the rotated one, let go): every refresh token is presented exactly
/// once, every replace under the hold is stored, and versions strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_refreshers_on_two_pools_present_every_refresh_token_once() {
    const REFRESHERS: usize = 8;
    const ROUNDS: usize = 5;
    let db = TestDb::create().await;
    let stores = [
        Arc::new(store(&db, kek(13)).await),
        Arc::new(store(&db, kek(13)).await),
    ];
    let alice = GrantKey::for_subject("github", "alice");
    stores[0]
        .put(&alice, connected("rt-0"))
        .await
        .expect("connect");
    let presented: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let stored_versions: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut tasks = Vec::new();
    for n in 0..REFRESHERS {
        let store = Arc::clone(&stores[n % 2]);
        let (alice, presented, stored_versions) = (
            alice.clone(),
            Arc::clone(&presented),
            Arc::clone(&stored_versions),
        );
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let held = {
                    let (store, alice) = (Arc::clone(&store), alice.clone());
                    tokio::task::spawn_blocking(move || store.hold_refresh(&alice))
                        .await
                        .expect("join")
                        .expect("hold")
                        .expect("a PostgreSQL hold")
                };
                let (grant, hold) = held;
                let token = grant
                    .refresh_token()
                    .map(|t| t.expose().to_owned())
                    .expect("a refresh token");
                *presented
                    .lock()
                    .expect("presented")
                    .entry(token)
                    .or_default() += 1;
                // The token endpoint's answer takes a moment.
                tokio::time::sleep(Duration::from_millis(5)).await;
                let now = SystemTime::now();
                let update = GrantUpdate::Issued {
                    access_token: Secret::new(format!("at-{n}-{round}")),
                    issued_at: now,
                    expires_at: now + Duration::from_secs(60),
                    refresh_token: Some(Secret::new(format!("rt-{n}-{round}"))),
                };
                match store
                    .replace(&alice, grant.version(), update)
                    .await
                    .expect("replace")
                {
                    Replaced::Stored(next) => {
                        assert_eq!(next.version(), grant.version() + 1);
                        stored_versions
                            .lock()
                            .expect("versions")
                            .push(next.version());
                    }
                    other => panic!("a replace under the hold was not stored: {other:?}"),
                }
                drop(hold);
            }
        }));
    }
    for task in tasks {
        task.await.expect("refresher");
    }
    let presented = presented.lock().expect("presented").clone();
    assert_eq!(presented.len(), REFRESHERS * ROUNDS, "{presented:?}");
    assert!(
        presented.values().all(|&n| n == 1),
        "a refresh token was presented twice: {presented:?}"
    );
    assert!(presented.contains_key("rt-0"));
    let versions = stored_versions.lock().expect("versions").clone();
    // In the order they were stored, the versions go up one at a time.
    let expected: Vec<u64> = (2..=(1 + REFRESHERS * ROUNDS) as u64).collect();
    assert_eq!(versions, expected);
    let last = stores[1].current(&alice).await.expect("current");
    assert_eq!(last.version(), (1 + REFRESHERS * ROUNDS) as u64);
}

#[tokio::test]
async fn a_database_at_schema_version_3_gains_the_grant_table_and_keeps_its_journal() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    let intent = intent();
    journal.write_intent(&intent).await.expect("intent");
    let record = journal.append(event(&intent)).await.expect("append");
    drop(journal);
    // Back to what a build with three migrations left.
    db.sql()
        .await
        .batch_execute(&format!(
            "{} DROP TABLE sallyport_grants; DROP TABLE sallyport_remembered_approvals; \
             DROP TABLE sallyport_checkpoints; \
             DELETE FROM sallyport_schema_version WHERE version > 3;",
            super::shards::UNDO_MIGRATION_8
        ))
        .await
        .expect("downgrade");
    let store = store(&db, kek(14)).await;
    let alice = GrantKey::for_subject("github", "alice");
    store.put(&alice, connected("rt-alice")).await.expect("put");
    let versions: Vec<i64> = db
        .sql()
        .await
        .query(
            "SELECT version FROM sallyport_schema_version ORDER BY version",
            &[],
        )
        .await
        .expect("versions")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    let journal = db.journal("b").await;
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(journal.records().await.expect("records"), vec![record]);
}

/// A grant stored by a build with four migrations (sealed without scopes, no
/// `scopes_granted` column) reads the same after migration 5: its tokens open, and it lists
/// the configured scopes, not as granted; a connect stored afterwards lists what was granted.
#[tokio::test]
async fn a_grant_table_at_schema_version_4_keeps_its_grants_and_lists_granted_scopes_after() {
    let db = TestDb::create().await;
    let alice = GrantKey::for_subject("github", "alice");
    {
        let store = store(&db, kek(15)).await;
        store
            .put(&alice, issued("at-alice-4", Some("rt-alice-4")))
            .await
            .expect("put");
    }
    // Back to what a build with four migrations left (its rows hold no scopes granted).
    db.sql()
        .await
        .batch_execute(&format!(
            "{} ALTER TABLE sallyport_grants DROP COLUMN scopes_granted;
             DROP TABLE sallyport_remembered_approvals;
             DROP TABLE sallyport_checkpoints;
             DELETE FROM sallyport_schema_version WHERE version > 4;",
            super::shards::UNDO_MIGRATION_8
        ))
        .await
        .expect("downgrade");
    let store = store(&db, kek(15)).await;
    let grant = store.current(&alice).await.expect("the old row opens");
    assert_eq!(grant.access_token().map(Secret::expose), Some("at-alice-4"));
    assert_eq!(grant.scopes(), None);
    let listed = store.list(Some("github")).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].scopes, ["repo", "read:user"]);
    assert!(!listed[0].scopes_granted);
    let now = SystemTime::now();
    store
        .replace(
            &GrantKey::for_subject("github", "bob"),
            0,
            GrantUpdate::Authorized {
                refresh_token: Secret::new("rt-bob"),
                access_token: Secret::new("at-bob"),
                issued_at: now,
                expires_at: now + Duration::from_secs(60),
                scopes: vec!["repo".to_owned()],
            },
        )
        .await
        .expect("connect bob");
    let listed = store.list(Some("github")).await.expect("list");
    let scopes: Vec<(Option<&str>, &[String], bool)> = listed
        .iter()
        .map(|s| (s.subject.as_deref(), s.scopes.as_slice(), s.scopes_granted))
        .collect();
    assert_eq!(
        scopes,
        [
            (
                Some("alice"),
                ["repo".to_owned(), "read:user".to_owned()].as_slice(),
                false
            ),
            (Some("bob"), ["repo".to_owned()].as_slice(), true),
        ]
    );
}
