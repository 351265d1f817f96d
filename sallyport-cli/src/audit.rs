//! `sallyport audit …`

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sallyport_core::journal::checkpoint::{
    Checkpoint, CheckpointError, DEFAULT_SHARD, InclusionProof, ProveError, checkpoint_if_grown,
    make_checkpoint,
};
use sallyport_core::journal::{
    ApprovalStore, AuditEvent, ChainHead, HeadSigningKey, HeadVerifyingKey, Journal, KeyError,
    SqliteJournal, VerifyReport, export_json_lines,
};
use sallyport_core::vault::default_data_dir;
use sallyport_postgres::PostgresJournal;

use crate::args::{AuditCommand, Cli, JournalLocation};
use crate::exit::{Exit, Failure};

fn journal_location(cli: &Cli) -> Result<JournalLocation, Failure> {
    cli.journal
        .clone()
        .or_else(|| default_data_dir().map(|d| JournalLocation::File(d.join("journal.db"))))
        .ok_or_else(|| {
            Failure::new(
                Exit::Usage,
                "no home directory is known; name the journal with --journal",
            )
        })
}

/// Opens the journal `--journal` names: a SQLite file (which must exist) or a PostgreSQL
/// database (its schema created or upgraded by connecting, as an executor would). A
/// PostgreSQL journal runs its writer on `rt`, so use it through `rt` only, and drop it
/// before `rt`.
pub(crate) fn open_journal(
    cli: &Cli,
    rt: &tokio::runtime::Runtime,
) -> Result<Arc<dyn Journal>, Failure> {
    let journal: Arc<dyn Journal> = open_approval_store(cli, rt)?;
    Ok(journal)
}

/// [`open_journal`], as the approval store both journals are.
pub(crate) fn open_approval_store(
    cli: &Cli,
    rt: &tokio::runtime::Runtime,
) -> Result<Arc<dyn ApprovalStore>, Failure> {
    match journal_location(cli)? {
        JournalLocation::File(path) => {
            // Opening creates a missing file; an audit command must not.
            if !path.is_file() {
                return Err(Failure::new(
                    Exit::NotFound,
                    format!("no journal at {}", path.display()),
                ));
            }
            Ok(Arc::new(SqliteJournal::open(&path)?))
        }
        // Its errors carry the URL with the password taken out (sallyport-postgres redacts
        // every message it keeps).
        JournalLocation::Postgres(url) => Ok(Arc::new(
            rt.block_on(PostgresJournal::builder(&url).pool_size(2).connect())?,
        )),
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(Exit::Failure, format!("cannot start the runtime: {e}")))
}

fn io_failure(what: &str, e: &std::io::Error) -> Failure {
    Failure::new(Exit::Failure, format!("cannot {what}: {e}"))
}

/// `audit keygen`: a new key pair, secret and public in two new files.
fn keygen(out: &Path, public_out: Option<&Path>) -> Result<(), Failure> {
    let public_path = public_out.map_or_else(
        || {
            let mut name = out.as_os_str().to_owned();
            name.push(".pub");
            PathBuf::from(name)
        },
        Path::to_path_buf,
    );
    // Checked first, so a failure leaves neither file behind.
    if public_path.exists() {
        return Err(Failure::new(
            Exit::AlreadyExists,
            format!(
                "{} already exists; it was not replaced",
                public_path.display()
            ),
        ));
    }
    let key = HeadSigningKey::generate().map_err(|e| key_failure(&e))?;
    key.write_new(out).map_err(|e| key_failure(&e))?;
    let public = key.verifying_key();
    public
        .write_new(&public_path)
        .map_err(|e| key_failure(&e))?;
    println!(
        "signing key {} written to {} (keep it secret, mode 0600); public key in {}",
        public.key_id(),
        out.display(),
        public_path.display()
    );
    Ok(())
}

pub(crate) fn key_failure(e: &KeyError) -> Failure {
    let exit = match e {
        KeyError::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists => {
            Exit::AlreadyExists
        }
        KeyError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Exit::NotFound
        }
        KeyError::Malformed { .. } | KeyError::TooOpen { .. } => Exit::Usage,
        _ => Exit::Failure,
    };
    let mut text = e.to_string();
    if let Some(source) = std::error::Error::source(e) {
        text.push_str(&format!(": {source}"));
    }
    Failure::new(exit, text)
}

/// The report of the shard named `name` alone (`audit verify --shard`).
fn one_shard(report: VerifyReport, name: &str) -> Result<VerifyReport, Failure> {
    let found = if report.shards.is_empty() {
        // A journal without shards other than the default reports that one as the whole.
        (name == DEFAULT_SHARD).then_some(report)
    } else {
        report
            .shards
            .into_iter()
            .find(|s| s.shard == name)
            .map(|s| VerifyReport {
                records: s.head.count,
                head: s.head,
                first_break: s.first_break,
                last_signed: s.last_signed,
                shards: Vec::new(),
            })
    };
    found.ok_or_else(|| {
        Failure::new(
            Exit::NotFound,
            format!("this journal holds no record in shard `{name}`"),
        )
    })
}

/// The lines `audit verify` prints for an intact journal: the whole (or the one shard
/// asked for), then each shard when there are several.
fn print_intact(report: &VerifyReport, shard: Option<&str>) {
    let signed = |last: Option<u64>| {
        last.map_or_else(String::new, |l| format!(", signed through record {l}"))
    };
    match shard {
        Some(name) => println!(
            "intact: shard `{name}`: {} records, head {}{}",
            report.head.count,
            report.head.hash,
            signed(report.last_signed)
        ),
        None if report.shards.is_empty() => println!(
            "intact: {} records, head {}{}",
            report.head.count,
            report.head.hash,
            signed(report.last_signed)
        ),
        None => {
            println!(
                "intact: {} records in {} shards",
                report.records,
                report.shards.len()
            );
            for s in &report.shards {
                println!(
                    "  shard `{}`: {} records, head {}{}",
                    s.shard,
                    s.head.count,
                    s.head.hash,
                    signed(s.last_signed)
                );
            }
        }
    }
}

/// `audit checkpoint`: sign and store a checkpoint over the chain.
fn checkpoint(
    journal: &dyn Journal,
    rt: &tokio::runtime::Runtime,
    signing_key: &Path,
    json: bool,
) -> Result<(), Failure> {
    let key = HeadSigningKey::read_file(signing_key).map_err(|e| key_failure(&e))?;
    let cp = rt
        .block_on(make_checkpoint(journal, &key))
        .map_err(|e| match e {
            CheckpointError::Journal(e) => Failure::from(e),
            other => Failure::new(Exit::ChainBroken, other.to_string()),
        })?;
    print_checkpoint(&cp, json)
}

/// One checkpoint as `audit checkpoint` prints it: pretty JSON, or one line.
fn print_checkpoint(cp: &Checkpoint, json: bool) -> Result<(), Failure> {
    if json {
        let text = serde_json::to_string_pretty(cp)
            .map_err(|e| Failure::new(Exit::Failure, e.to_string()))?;
        println!("{text}");
    } else {
        let size: u64 = cp.shards.iter().map(|h| h.size).sum();
        let shards = match cp.shards.len() {
            1 => String::new(),
            n => format!(" in {n} shards"),
        };
        println!(
            "checkpoint signed by key {} at {}: {size} records{shards}, root {}",
            cp.key_id, cp.signed_at, cp.root
        );
    }
    Ok(())
}

/// `audit checkpoint --every SECONDS`: a checkpoint each period in which the journal grew,
/// until the process is stopped.
fn checkpoint_every(
    journal: &dyn Journal,
    rt: &tokio::runtime::Runtime,
    signing_key: &Path,
    seconds: u64,
    json: bool,
) -> Result<(), Failure> {
    let key = HeadSigningKey::read_file(signing_key).map_err(|e| key_failure(&e))?;
    let period = std::time::Duration::from_secs(seconds);
    loop {
        match rt.block_on(checkpoint_if_grown(journal, &key)) {
            Ok(Some(cp)) => print_checkpoint(&cp, json)?,
            Ok(None) => {}
            // A journal that cannot be read is this command's failure, as it is without
            // `--every`; a broken chain is reported and tried again next period.
            Err(CheckpointError::Journal(e)) => return Err(Failure::from(e)),
            Err(other) => eprintln!("sallyport: {other}"),
        }
        let _ = std::io::stdout().flush();
        std::thread::sleep(period);
    }
}

/// `audit prove`: the inclusion proof of one receipt, against the newest checkpoint that
/// covers it (signed by `public_key`, when given).
fn prove(
    journal: &dyn Journal,
    rt: &tokio::runtime::Runtime,
    receipt: &str,
    output: Option<&Path>,
    public_key: Option<&Path>,
) -> Result<(), Failure> {
    let key = public_key
        .map(|p| HeadVerifyingKey::read_file(p).map_err(|e| key_failure(&e)))
        .transpose()?;
    let shown = sallyport_core::consent::escape(receipt);
    // Checked first, so a refusal leaves no file behind.
    if let Some(path) = output
        && path.exists()
    {
        return Err(Failure::new(
            Exit::AlreadyExists,
            format!("{} already exists; it was not replaced", path.display()),
        ));
    }
    let checkpoints = rt.block_on(journal.checkpoints())?;
    let rows = rt.block_on(journal.chain_rows())?;
    let anchors = rt.block_on(journal.anchors())?;
    let (shard, seq) = rows
        .iter()
        .find(|row| {
            row.event_json.contains(receipt)
                && serde_json::from_str::<AuditEvent>(&row.event_json)
                    .is_ok_and(|event| event.receipt_id.as_str() == receipt)
        })
        .map(|row| (row.shard.clone(), u64::try_from(row.seq).unwrap_or(0)))
        .ok_or_else(|| {
            let pruned = anchors
                .iter()
                .map(|a| format!(" (records 1 to {} of shard `{}` were sealed and pruned: check a pruned receipt in its sealed export)", a.seq, a.shard))
                .collect::<String>();
            Failure::new(
                Exit::NotFound,
                format!("no record with receipt `{shown}` in this journal{pruned}"),
            )
        })?;
    let by_key: Vec<&Checkpoint> = checkpoints
        .iter()
        .filter(|c| key.as_ref().is_none_or(|k| c.key_id == k.key_id()))
        .collect();
    let Some(newest) = by_key.last() else {
        let by = key.map_or_else(String::new, |k| format!(" signed by key {}", k.key_id()));
        return Err(Failure::new(
            Exit::NoCheckpoint,
            format!(
                "this journal holds no checkpoint{by}; make one with `sallyport audit checkpoint --signing-key FILE`"
            ),
        ));
    };
    let anchor = anchors.iter().find(|a| a.shard == shard);
    let proof =
        InclusionProof::build_from(anchor, &rows, &shard, newest, seq).map_err(|e| match e {
            ProveError::NotCovered { .. } => Failure::new(
                Exit::NoCheckpoint,
                format!("receipt `{shown}` (record {seq}): {e}"),
            ),
            ProveError::Rewritten { .. } => Failure::new(Exit::ChainBroken, e.to_string()),
            other => Failure::new(Exit::Failure, other.to_string()),
        })?;
    if let Some(key) = &key {
        proof.verify(key).map_err(|e| {
            Failure::new(
                Exit::ChainBroken,
                format!("the proof made from this journal does not verify: {e}"),
            )
        })?;
    }
    // Compact, one line and a newline: the file on disk is the size issue 39's target
    // counts (≤ 2 KB for a journal of a million records).
    let text = proof.to_written();
    match output {
        Some(path) => {
            use std::io::Write as _;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| io_failure(&format!("create {}", path.display()), &e))?;
            file.write_all(text.as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| io_failure(&format!("write {}", path.display()), &e))?;
            eprintln!(
                "proof of receipt {shown} (record {seq} of {}) written to {}",
                proof.tree_size,
                path.display()
            );
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// `audit check-proof`: a proof checked with the public key alone.
fn check_proof(proof_path: &Path, public_key: &Path, json: bool) -> Result<(), Failure> {
    let key = HeadVerifyingKey::read_file(public_key).map_err(|e| key_failure(&e))?;
    let text = std::fs::read_to_string(proof_path).map_err(|e| {
        let exit = if e.kind() == std::io::ErrorKind::NotFound {
            Exit::NotFound
        } else {
            Exit::Failure
        };
        Failure::new(exit, format!("cannot read {}: {e}", proof_path.display()))
    })?;
    let proof: InclusionProof = serde_json::from_str(&text).map_err(|e| {
        Failure::new(
            Exit::Corrupt,
            format!(
                "{} is not an inclusion proof ({e}); it was left untouched",
                proof_path.display()
            ),
        )
    })?;
    let proven = proof.verify(&key).map_err(|e| {
        Failure::new(
            Exit::ProofInvalid,
            format!("the proof in {} does not verify: {e}", proof_path.display()),
        )
    })?;
    if json {
        let value = serde_json::json!({
            "verified": true,
            "receipt_id": proven.receipt_id,
            "shard": proven.shard,
            "seq": proven.seq,
            "tree_size": proven.tree_size,
            "signed_at": proven.signed_at,
            "key_id": proven.key_id,
        });
        println!("{value:#}");
    } else {
        println!(
            "verified: receipt {} is record {} of {} in shard {}, under the checkpoint signed by key {} at {}",
            sallyport_core::consent::escape(proven.receipt_id.as_str()),
            proven.seq,
            proven.tree_size,
            proven.shard,
            proven.key_id,
            proven.signed_at
        );
    }
    Ok(())
}

pub(crate) fn run(cli: &Cli, cmd: &AuditCommand) -> Result<(), Failure> {
    match cmd {
        AuditCommand::Keygen { out, public_out } => {
            return keygen(out, public_out.as_deref());
        }
        AuditCommand::CheckProof {
            proof,
            public_key,
            json,
        } => return check_proof(proof, public_key, *json),
        AuditCommand::CheckExport {
            file,
            public_key,
            json,
        } => return crate::seal::check_export(file, public_key, *json),
        _ => {}
    }
    let rt = runtime()?;
    let journal = open_journal(cli, &rt)?;
    let journal = journal.as_ref();
    match cmd {
        // Need no journal: handled before one is opened.
        AuditCommand::Keygen { .. }
        | AuditCommand::CheckProof { .. }
        | AuditCommand::CheckExport { .. } => Ok(()),
        AuditCommand::Seal {
            signing_key,
            shard,
            out,
        } => crate::seal::seal(journal, &rt, signing_key, shard, out),
        AuditCommand::Checkpoint {
            signing_key,
            every,
            json,
        } => match every {
            None => checkpoint(journal, &rt, signing_key, *json),
            Some(seconds) => checkpoint_every(journal, &rt, signing_key, *seconds, *json),
        },
        AuditCommand::Prove {
            receipt,
            output,
            public_key,
        } => prove(
            journal,
            &rt,
            receipt,
            output.as_deref(),
            public_key.as_deref(),
        ),
        AuditCommand::Verify {
            head,
            public_key,
            shard,
            json,
        } => {
            let mut report = match public_key {
                Some(path) => {
                    let key = HeadVerifyingKey::read_file(path).map_err(|e| key_failure(&e))?;
                    rt.block_on(journal.verify_signed(&key))?
                }
                None => rt.block_on(journal.verify())?,
            };
            if let Some(head_path) = head {
                let text = std::fs::read_to_string(head_path)
                    .map_err(|e| io_failure(&format!("read {}", head_path.display()), &e))?;
                let exported: ChainHead = serde_json::from_str(&text).map_err(|e| {
                    Failure::new(
                        Exit::Usage,
                        format!("{} is not an exported head: {e}", head_path.display()),
                    )
                })?;
                let records = rt.block_on(journal.records())?;
                let anchor = rt
                    .block_on(journal.anchors())?
                    .into_iter()
                    .find(|a| a.shard == DEFAULT_SHARD);
                // By position, not index: records up to an anchor may have been pruned (a
                // head exported at a pruned position cannot be compared and does not match).
                let hash_at = records
                    .iter()
                    .find(|r| r.shard == DEFAULT_SHARD && r.seq == exported.count)
                    .map(|r| r.hash.clone())
                    .or_else(|| anchor.filter(|a| a.seq == exported.count).map(|a| a.hash))
                    .or_else(|| {
                        (exported.count == 0)
                            .then(|| sallyport_core::journal::GENESIS_HASH.to_owned())
                    });
                report.check_against(&exported, hash_at.as_deref());
            }
            if let Some(name) = shard {
                report = one_shard(report, name)?;
            }
            if *json {
                let text = serde_json::to_string_pretty(&report)
                    .map_err(|e| Failure::new(Exit::Failure, e.to_string()))?;
                println!("{text}");
            }
            match &report.first_break {
                None => {
                    if !*json {
                        print_intact(&report, shard.as_deref());
                    }
                    Ok(())
                }
                Some(b) => {
                    let signed = match (public_key, report.last_signed) {
                        (None, _) => String::new(),
                        (Some(_), Some(last)) => format!(" (last signed record: {last})"),
                        (Some(_), None) => " (no record is signed by this key)".to_owned(),
                    };
                    let in_shard = b
                        .shard
                        .as_deref()
                        .or(shard.as_deref())
                        .map_or_else(String::new, |s| format!(" of shard `{s}`"));
                    Err(Failure::new(
                        Exit::ChainBroken,
                        format!(
                            "audit chain broken at record {}{in_shard} ({}): {}{signed}",
                            b.seq,
                            serde_json::to_value(b.kind)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_default(),
                            b.detail
                        ),
                    ))
                }
            }
        }
        AuditCommand::Export {
            output,
            head_output,
        } => {
            let count = match output {
                Some(path) => {
                    let mut file = std::fs::File::create(path)
                        .map_err(|e| io_failure(&format!("create {}", path.display()), &e))?;
                    let n = rt
                        .block_on(export_json_lines(journal, &mut file))
                        .map_err(|e| Failure::new(Exit::Failure, format!("export failed: {e}")))?;
                    file.sync_all()
                        .map_err(|e| io_failure(&format!("write {}", path.display()), &e))?;
                    n
                }
                None => {
                    let stdout = std::io::stdout();
                    let mut out = stdout.lock();
                    let n = rt
                        .block_on(export_json_lines(journal, &mut out))
                        .map_err(|e| Failure::new(Exit::Failure, format!("export failed: {e}")))?;
                    out.flush()
                        .map_err(|e| io_failure("write standard output", &e))?;
                    n
                }
            };
            if let Some(path) = head_output {
                let report = rt.block_on(journal.verify())?;
                let text = serde_json::to_string(&report.head)
                    .map_err(|e| Failure::new(Exit::Failure, e.to_string()))?;
                std::fs::write(path, format!("{text}\n"))
                    .map_err(|e| io_failure(&format!("write {}", path.display()), &e))?;
            }
            eprintln!("exported {count} records");
            Ok(())
        }
        AuditCommand::Unresolved(args) => {
            let list = rt.block_on(journal.unresolved())?;
            if args.json {
                let text = serde_json::to_string_pretty(&list)
                    .map_err(|e| Failure::new(Exit::Failure, e.to_string()))?;
                println!("{text}");
            } else if list.is_empty() {
                println!("no unresolved attempts");
            } else {
                println!(
                    "{:<40} {:<32} {:<16} {:>10}  CREATED",
                    "ATTEMPT", "ACTION", "PHASE", "DISPATCHES"
                );
                for a in &list {
                    println!(
                        "{:<40} {:<32} {:<16} {:>10}  {}",
                        a.attempt_id,
                        a.action,
                        a.phase.as_str(),
                        a.dispatches,
                        a.created_at
                    );
                }
            }
            Ok(())
        }
    }
}
