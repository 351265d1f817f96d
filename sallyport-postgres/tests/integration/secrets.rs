//! No error, and no `Debug` of the journal or its builder, shows the password of the
//! connection string: a real role with a real password, over TCP.

use std::error::Error as _;

use sallyport_core::journal::{Journal, JournalError};
use sallyport_postgres::{PostgresError, PostgresJournal};
use sallyport_tests::postgres::{TestDb, admin_url, client, event, intent};

/// Everything an error can print: `Display` and `Debug` of it and of every source.
fn everything(e: &JournalError) -> String {
    let mut out = format!("{e}\n{e:?}\n");
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!("{s}\n{s:?}\n"));
        source = s.source();
    }
    out
}

/// A login role with `password`, dropped when this is (declare it before the database it
/// owns, so the database is dropped first).
struct Role {
    name: String,
}

impl Role {
    async fn create(password: &str) -> Self {
        let name = format!("sp_role_{}", uuid::Uuid::new_v4().simple());
        client(&admin_url())
            .await
            .batch_execute(&format!("CREATE ROLE {name} LOGIN PASSWORD '{password}'"))
            .await
            .expect("role");
        Self { name }
    }

    /// Makes the role the owner of `db`, so it may create the journal's tables there.
    async fn own(&self, db: &TestDb) {
        client(&admin_url())
            .await
            .batch_execute(&format!(
                "ALTER DATABASE {} OWNER TO {}",
                db.name, self.name
            ))
            .await
            .expect("owner");
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let name = self.name.clone();
        let dropped = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(async {
                    client(&admin_url())
                        .await
                        .batch_execute(&format!("DROP ROLE IF EXISTS {name}"))
                        .await
                })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) && !std::thread::panicking() {
            panic!("DROP ROLE {} failed: {dropped:?}", self.name);
        }
    }
}

async fn tcp_port(db: &TestDb) -> String {
    db.sql()
        .await
        .query_one("SHOW port", &[])
        .await
        .expect("port")
        .get(0)
}

#[tokio::test]
async fn no_error_or_debug_output_carries_the_connection_strings_password() {
    let password = format!("Pw{}", uuid::Uuid::new_v4().simple());
    let role = Role::create(&password).await;
    let db = TestDb::create().await;
    role.own(&db).await;
    let port = tcp_port(&db).await;
    let url = format!(
        "postgres://{}:{password}@127.0.0.1:{port}/{}",
        role.name, db.name
    );

    // The right password connects, and neither the builder nor the journal shows it.
    let builder = PostgresJournal::builder(&url).owner("a");
    let shown = format!("{builder:?}");
    assert!(!shown.contains(&password), "{shown}");
    assert!(
        shown.contains(&format!("{}:***@127.0.0.1", role.name)),
        "{shown}"
    );
    let journal = builder.connect().await.expect("connects with the password");
    let shown = format!("{journal:?}");
    assert!(!shown.contains(&password), "{shown}");
    assert!(shown.contains(":***@"), "{shown}");

    // A server error whose message quotes the password has it taken out.
    db.sql()
        .await
        .batch_execute(&format!(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
                 $$ BEGIN RAISE EXCEPTION 'no: {password}'; END $$;
             CREATE TRIGGER refuse BEFORE INSERT ON sallyport_attempts
                 FOR EACH ROW EXECUTE FUNCTION refuse();"
        ))
        .await
        .expect("trigger");
    let err = journal.write_intent(&intent()).await.expect_err("refused");
    let text = everything(&err);
    assert!(matches!(err, JournalError::Write(_)), "{text}");
    assert!(!text.contains(&password), "{text}");
    assert!(text.contains("no: ***"), "{text}");
    let code = err
        .source()
        .and_then(|s| s.downcast_ref::<PostgresError>())
        .and_then(PostgresError::code);
    assert_eq!(code, Some("P0001"), "{text}");
    // The failed batch left the journal working: a record (no attempt row) goes in.
    let record = journal.append(event(&intent())).await.expect("append");
    assert_eq!(record.seq, 1);
    drop(journal);

    let mut failures = Vec::new();
    // A wrong password, over the same URL shape.
    let wrong = url.replace(&password, &format!("{password}x"));
    failures.push(
        PostgresJournal::connect(&wrong)
            .await
            .expect_err("wrong password"),
    );
    // Nothing listening.
    failures.push(
        PostgresJournal::connect(&format!(
            "postgres://{}:{password}@127.0.0.1:1/x",
            role.name
        ))
        .await
        .expect_err("nothing listens on port 1"),
    );
    // A connection string that does not parse.
    failures.push(
        PostgresJournal::connect(&format!("postgres://u:{password}@h:notaport/x"))
            .await
            .expect_err("bad port"),
    );
    // Key-value form.
    failures.push(
        PostgresJournal::connect(&format!(
            "host=127.0.0.1 port={port} user={} password={password}x dbname={}",
            role.name, db.name
        ))
        .await
        .expect_err("wrong password, key-value form"),
    );
    for err in &failures {
        let text = everything(err);
        assert!(matches!(err, JournalError::Open { .. }), "{text}");
        assert!(!text.contains(&password), "{text}");
    }
    // The login failure says what failed.
    let login = everything(&failures[0]);
    assert!(login.contains("password authentication failed"), "{login}");
    assert!(login.contains(":***@127.0.0.1"), "{login}");

    // The database goes first, then the role that owned it.
    drop(db);
    drop(role);
}
