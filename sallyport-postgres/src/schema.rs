//! The embedded, versioned migrations. Every process that connects runs them in one
//! transaction under a transaction-scoped advisory lock, so processes starting together
//! never see a half-made schema; a database migrated by a newer build is refused untouched.

use deadpool_postgres::Client;

/// The schema version this build writes: how many embedded migrations it has (each
/// recorded in `sallyport_schema_version` once applied).
pub const SCHEMA_VERSION: i64 = 9;

/// The advisory lock key the migration holds (`'sallyport'` in ASCII).
const MIGRATION_LOCK: i64 = 0x73_61_6c_6c_79_70_6f_72;

/// Migration `n + 1` is `MIGRATIONS[n]`; each runs once, in order, and is recorded in
/// `sallyport_schema_version`. Never edit a released migration: append a new one.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    // 1: attempts with leases and fencing epochs, the audit chain, its head row, signed heads.
    "
    CREATE TABLE sallyport_attempts (
        attempt_id      TEXT PRIMARY KEY,
        action          TEXT NOT NULL,
        session_id      TEXT NOT NULL,
        idempotency_key TEXT NOT NULL UNIQUE,
        fingerprint     TEXT NOT NULL,
        definition_hash TEXT NOT NULL,
        effect          TEXT NOT NULL,
        arguments       TEXT NOT NULL,
        phase           TEXT NOT NULL,
        dispatches      BIGINT NOT NULL DEFAULT 0,
        status          TEXT,
        created_at      TEXT NOT NULL,
        updated_at      TEXT NOT NULL,
        owner           TEXT NOT NULL,
        lease_until     TIMESTAMPTZ NOT NULL,
        epoch           BIGINT NOT NULL DEFAULT 1
    );
    -- Attempts no outcome has closed yet: what lease renewal and takeover look at.
    CREATE INDEX sallyport_attempts_open ON sallyport_attempts (lease_until) WHERE status IS NULL;
    CREATE TABLE sallyport_audit (
        seq        BIGINT PRIMARY KEY,
        receipt_id TEXT NOT NULL,
        attempt_id TEXT NOT NULL,
        prev_hash  TEXT NOT NULL,
        hash       TEXT NOT NULL,
        event      TEXT NOT NULL
    );
    CREATE INDEX sallyport_audit_attempt ON sallyport_audit (attempt_id);
    -- The one row every append locks FOR UPDATE: the serialization point of the chain.
    CREATE TABLE sallyport_chain_head (
        id   INTEGER PRIMARY KEY CHECK (id = 1),
        seq  BIGINT NOT NULL,
        hash TEXT NOT NULL
    );
    INSERT INTO sallyport_chain_head (id, seq, hash)
        VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');
    CREATE TABLE sallyport_heads (
        count     BIGINT PRIMARY KEY,
        hash      TEXT NOT NULL,
        key_id    TEXT NOT NULL,
        signature TEXT NOT NULL,
        signed_at TEXT NOT NULL
    );
    ",
    // 2: the approval store. The approval itself is its JSON body; the columns beside it
    // are what lists filter on.
    "
    CREATE TABLE sallyport_approvals (
        approval_id   TEXT PRIMARY KEY,
        state         TEXT NOT NULL,
        session_id    TEXT NOT NULL,
        fingerprint   TEXT NOT NULL,
        created_at_ms BIGINT NOT NULL,
        body          TEXT NOT NULL
    );
    CREATE INDEX sallyport_approvals_state ON sallyport_approvals (state, created_at_ms);
    ",
    // 3: the policy's call counts, shared by the fleet (`calls.rs`): one row per call a
    // policy let through, kept a day. Existing tables are untouched.
    "
    CREATE TABLE sallyport_policy_calls (
        attempt_id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        action     TEXT NOT NULL,
        effect     TEXT NOT NULL,
        objects    TEXT NOT NULL,
        status     TEXT,
        at_ms      BIGINT NOT NULL
    );
    CREATE INDEX sallyport_policy_calls_session ON sallyport_policy_calls (session_id, at_ms);
    CREATE INDEX sallyport_policy_calls_at ON sallyport_policy_calls (at_ms);
    ",
    // 4: the OAuth grant store (`grants/`): one row per grant, its tokens sealed under a
    // data key of its own that the key-encryption key `key_id` wraps; the columns beside
    // them are what `list` shows, never a token. A shared grant has `shared` and an empty
    // subject. Existing tables are untouched.
    "
    CREATE TABLE sallyport_grants (
        credential    TEXT NOT NULL,
        shared        BOOLEAN NOT NULL,
        subject       TEXT NOT NULL,
        version       BIGINT NOT NULL,
        key_id        TEXT NOT NULL,
        wrapped_key   BYTEA NOT NULL,
        payload       BYTEA NOT NULL,
        scopes        TEXT[] NOT NULL DEFAULT '{}',
        expires_at_ms BIGINT,
        refresh_token BOOLEAN NOT NULL,
        reconnect     TEXT,
        updated_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
        PRIMARY KEY (credential, shared, subject),
        CHECK (version > 0),
        CHECK (shared = (subject = ''))
    );
    CREATE INDEX sallyport_grants_key_id ON sallyport_grants (key_id);
    ",
    // 5: whether a grant's `scopes` are the ones the provider granted (an account connected
    // through the authorization code flow) or the credential's configuration, which a vault
    // that hands the store out replaces with its own. Existing rows keep their
    // configuration, as before.
    "
    ALTER TABLE sallyport_grants ADD COLUMN scopes_granted BOOLEAN NOT NULL DEFAULT false;
    ",
    // 6: remembered approvals (`remembered.rs`): an approver's standing approval of later
    // calls of one action, its JSON body beside the columns reads filter on and the flag a
    // revocation compares and sets. Existing tables are untouched.
    "
    CREATE TABLE sallyport_remembered_approvals (
        remembered_id TEXT PRIMARY KEY,
        action        TEXT NOT NULL,
        created_at_ms BIGINT NOT NULL,
        revoked       BOOLEAN NOT NULL DEFAULT false,
        body          TEXT NOT NULL
    );
    CREATE INDEX sallyport_remembered_approvals_action
        ON sallyport_remembered_approvals (action, created_at_ms);
    ",
    // 7: signed checkpoints (`checkpoints.rs`): a Merkle root over every shard's records,
    // signed, for inclusion proofs; its JSON body beside the default shard's size and the
    // signing time. Existing tables and records are untouched.
    "
    CREATE TABLE sallyport_checkpoints (
        id        BIGSERIAL PRIMARY KEY,
        size      BIGINT NOT NULL,
        signed_at TEXT NOT NULL,
        body      TEXT NOT NULL
    );
    ",
    // 8: the audit chain in shards, each with a head row of its own, so that appends to
    // different shards never wait on one row lock. Every existing record, head and signed
    // head is the `default` shard's, whose chain starts at the same 64 zeros as before, so
    // each keeps its hash. (A constant default adds the column without rewriting the table.)
    "
    ALTER TABLE sallyport_audit ADD COLUMN shard TEXT NOT NULL DEFAULT 'default';
    ALTER TABLE sallyport_audit DROP CONSTRAINT sallyport_audit_pkey;
    ALTER TABLE sallyport_audit ADD PRIMARY KEY (shard, seq);
    ALTER TABLE sallyport_chain_head ADD COLUMN shard TEXT NOT NULL DEFAULT 'default';
    ALTER TABLE sallyport_chain_head DROP COLUMN id;
    ALTER TABLE sallyport_chain_head ADD PRIMARY KEY (shard);
    ALTER TABLE sallyport_heads ADD COLUMN shard TEXT NOT NULL DEFAULT 'default';
    ALTER TABLE sallyport_heads DROP CONSTRAINT sallyport_heads_pkey;
    ALTER TABLE sallyport_heads ADD PRIMARY KEY (shard, count);
    ",
    // 9: retention (`anchors.rs`): where each pruned shard's remaining records start, the
    // last pruned record's position and hash and the Merkle frontier after it (a JSON array
    // of hex hashes). Existing tables and records are untouched.
    "
    CREATE TABLE sallyport_anchors (
        shard    TEXT PRIMARY KEY,
        seq      BIGINT NOT NULL,
        hash     TEXT NOT NULL,
        frontier TEXT NOT NULL
    );
    ",
];

/// Why [`migrate`] did not finish.
#[derive(Debug)]
pub(crate) enum MigrateError {
    /// Tables of a journal exist but no version says what they are.
    Foreign,
    /// A newer build migrated this database.
    Newer(i64),
    /// What PostgreSQL said.
    Postgres(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for MigrateError {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Postgres(e)
    }
}

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction, or leaves it untouched.
pub(crate) async fn migrate(client: &mut Client) -> Result<(), MigrateError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let versioned: bool = tx
        .query_one(
            "SELECT to_regclass('sallyport_schema_version') IS NOT NULL",
            &[],
        )
        .await?
        .get(0);
    let found: i64 = if versioned {
        tx.query_one(
            "SELECT coalesce(max(version), 0)::BIGINT FROM sallyport_schema_version",
            &[],
        )
        .await?
        .get(0)
    } else {
        let tables: bool = tx
            .query_one(
                "SELECT to_regclass('sallyport_attempts') IS NOT NULL
                     OR to_regclass('sallyport_audit') IS NOT NULL",
                &[],
            )
            .await?
            .get(0);
        if tables {
            return Err(MigrateError::Foreign);
        }
        tx.batch_execute(
            "CREATE TABLE sallyport_schema_version (
                 version    BIGINT PRIMARY KEY,
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
             )",
        )
        .await?;
        0
    };
    if found > SCHEMA_VERSION {
        return Err(MigrateError::Newer(found));
    }
    for (version, migration) in (1_i64..)
        .zip(MIGRATIONS)
        .skip(usize::try_from(found).unwrap_or(0))
    {
        tx.batch_execute(migration).await?;
        tx.execute(
            "INSERT INTO sallyport_schema_version (version) VALUES ($1)",
            &[&version],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}
