//! `sallyport audit seal` and `sallyport audit check-export`: retention
//! ([`sallyport_core::journal::retention`]).
//!
//! `seal` makes a fresh checkpoint, writes the records of one shard after its previous seal
//! up to that checkpoint as a sealed range to a new file (never replacing one), fsyncs it
//! and its directory, reads it back and verifies it with the key's public half, and only
//! then prunes the records from the journal. A failure before the prune leaves the journal
//! as it was (with one more checkpoint); a refused prune leaves the file, which still
//! verifies on its own.

use std::io::Write as _;
use std::path::Path;

use sallyport_core::journal::checkpoint::{CheckpointError, make_checkpoint};
use sallyport_core::journal::retention::{Anchor, SealError, SealedRange, SealedRangeError};
use sallyport_core::journal::{HeadSigningKey, HeadVerifyingKey, Journal, JournalError};

use crate::audit::key_failure;
use crate::exit::{Exit, Failure, chain};

/// `audit seal`.
pub(crate) fn seal(
    journal: &dyn Journal,
    rt: &tokio::runtime::Runtime,
    signing_key: &Path,
    shard: &str,
    out: &Path,
) -> Result<(), Failure> {
    sallyport_core::journal::chain::check_shard_name(shard)
        .map_err(|e| Failure::new(Exit::Usage, e))?;
    let key = HeadSigningKey::read_file(signing_key).map_err(|e| key_failure(&e))?;
    // Checked first, so a refusal signs and writes nothing.
    if out.exists() {
        return Err(Failure::new(
            Exit::AlreadyExists,
            format!("{} already exists; it was not replaced", out.display()),
        ));
    }
    let checkpoint = rt
        .block_on(make_checkpoint(journal, &key))
        .map_err(|e| match e {
            CheckpointError::Journal(e) => Failure::from(e),
            other => Failure::new(Exit::ChainBroken, other.to_string()),
        })?;
    let before = rt
        .block_on(journal.anchors())?
        .into_iter()
        .find(|a| a.shard == shard)
        .unwrap_or_else(|| Anchor::genesis(shard));
    let rows = rt.block_on(journal.chain_rows())?;
    let (range, anchor) = SealedRange::build(&before, &rows, &checkpoint).map_err(|e| {
        Failure::new(
            match e {
                SealError::Nothing(_) => Exit::NothingToSeal,
                _ => Exit::ChainBroken,
            },
            e.to_string(),
        )
    })?;
    write_new_synced(out, range.to_json_lines().as_bytes())?;
    // Read back what is on disk, and check it as `check-export` will, before anything goes.
    let public = key.verifying_key();
    let written = std::fs::read_to_string(out).map_err(|e| {
        Failure::new(
            Exit::Failure,
            format!("cannot read back {}: {e}", out.display()),
        )
    })?;
    let sealed = SealedRange::parse(&written)
        .and_then(|r| r.verify(&public))
        .map_err(|e| {
            Failure::new(
                Exit::Failure,
                format!(
                    "{} does not verify as written ({}); nothing was pruned",
                    out.display(),
                    chain(&e)
                ),
            )
        })?;
    if sealed.anchor != anchor {
        return Err(Failure::new(
            Exit::Failure,
            format!(
                "{} does not end where the journal does; nothing was pruned",
                out.display()
            ),
        ));
    }
    let pruned = rt.block_on(journal.prune_sealed(&anchor)).map_err(|e| {
        let exit = match e {
            JournalError::PruneRefused { .. } | JournalError::Unsupported(_) => Exit::PruneRefused,
            _ => Exit::Failure,
        };
        Failure::new(
            exit,
            format!(
                "{} (the export {} was written and verifies)",
                chain(&e),
                out.display()
            ),
        )
    })?;
    println!(
        "sealed records {} to {} of shard `{shard}` under the checkpoint signed by key {} at {}: written to {}, {pruned} records pruned",
        sealed.first_seq,
        sealed.last_seq,
        sealed.key_id,
        sealed.signed_at,
        out.display()
    );
    Ok(())
}

/// Writes `bytes` to a new file (never replacing one), fsyncs it, then its directory, so
/// the file is on stable storage before any record is pruned.
fn write_new_synced(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let failed = |e: std::io::Error| {
        let exit = if e.kind() == std::io::ErrorKind::AlreadyExists {
            Exit::AlreadyExists
        } else {
            Exit::Failure
        };
        Failure::new(exit, format!("cannot write {}: {e}", path.display()))
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(failed)?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(failed)?;
    #[cfg(unix)]
    {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| Path::new("."));
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(failed)?;
    }
    Ok(())
}

/// `audit check-export`: a sealed range checked with the public key alone.
pub(crate) fn check_export(file: &Path, public_key: &Path, json: bool) -> Result<(), Failure> {
    let key = HeadVerifyingKey::read_file(public_key).map_err(|e| key_failure(&e))?;
    let text = std::fs::read_to_string(file).map_err(|e| {
        let exit = if e.kind() == std::io::ErrorKind::NotFound {
            Exit::NotFound
        } else {
            Exit::Failure
        };
        Failure::new(exit, format!("cannot read {}: {e}", file.display()))
    })?;
    let sealed = SealedRange::parse(&text)
        .and_then(|r| r.verify(&key))
        .map_err(|e| {
            // A first line that is no header at all: not a sealed range (as `check-proof`
            // says of a file that is no proof). Anything else is a range that fails.
            let exit = match e {
                SealedRangeError::Malformed { line: 1, .. } if !text.starts_with('{') => {
                    Exit::Corrupt
                }
                _ => Exit::ProofInvalid,
            };
            Failure::new(
                exit,
                format!(
                    "the sealed range in {} does not verify: {}",
                    file.display(),
                    chain(&e)
                ),
            )
        })?;
    if json {
        let value = serde_json::json!({
            "verified": true,
            "shard": sealed.shard,
            "first_seq": sealed.first_seq,
            "last_seq": sealed.last_seq,
            "signed_at": sealed.signed_at,
            "key_id": sealed.key_id,
        });
        println!("{value:#}");
    } else {
        println!(
            "verified: records {} to {} of shard {}, sealed under the checkpoint signed by key {} at {}",
            sealed.first_seq, sealed.last_seq, sealed.shard, sealed.key_id, sealed.signed_at
        );
    }
    Ok(())
}
