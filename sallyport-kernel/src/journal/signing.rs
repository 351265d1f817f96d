//! Signed chain heads: an Ed25519 key signs the chain's `(count, hash)` so that someone who
//! can write the journal file, but does not hold the key, cannot rewrite records and
//! recompute the hashes unnoticed.
//!
//! The hash chain alone proves only that the records link up; anyone with write access can
//! rebuild a consistent chain after an edit. A head signed with a key kept away from the
//! journal (a file of its own, mode 0600) pins every record up to that head, and a verifier
//! holding only the public key checks it: [`check_signed_heads`] reports the last position a
//! valid signature covers, and everything after it as unsigned.
//!
//! Backend-neutral: nothing here knows about SQLite, so every journal backend signs and
//! checks heads the same way.
//!
//! Key files are text: `sallyport-head-signing-key-v1 <base64 seed>` (the secret, written
//! mode 0600 and refused when group or others may read it) and `sallyport-head-key-v1
//! <base64 public key>`. `sallyport audit keygen --out FILE` writes both (`FILE`, `FILE.pub`).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use super::{BreakKind, ChainBreak, ChainHead, VerifyReport};

const SECRET_TAG: &str = "sallyport-head-signing-key-v1";
const PUBLIC_TAG: &str = "sallyport-head-key-v1";
/// Domain separation: a head signature can never be mistaken for a signature over anything
/// else made with the same key.
const MESSAGE_TAG: &str = "sallyport signed chain head v1";

/// The secret key that signs chain heads. Never printed: `Debug` shows only its key id.
pub struct HeadSigningKey {
    key: SigningKey,
}

impl std::fmt::Debug for HeadSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadSigningKey")
            .field("key_id", &self.verifying_key().key_id())
            .finish_non_exhaustive()
    }
}

impl HeadSigningKey {
    /// A new random key.
    ///
    /// # Errors
    ///
    /// [`KeyError::Random`] when the operating system has no randomness to give.
    pub fn generate() -> Result<Self, KeyError> {
        let mut seed = Zeroizing::new([0_u8; 32]);
        getrandom::fill(seed.as_mut_slice()).map_err(|_| KeyError::Random)?;
        Ok(Self {
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// Reads a key file written by [`HeadSigningKey::write_new`] (or `sallyport audit keygen`).
    ///
    /// # Errors
    ///
    /// [`KeyError::Io`] when the file cannot be read, [`KeyError::TooOpen`] when group or
    /// others may read it (Unix), [`KeyError::Malformed`] when it is not a signing key file.
    pub fn read_file(path: impl AsRef<Path>) -> Result<Self, KeyError> {
        let path = path.as_ref();
        check_private(path)?;
        let text =
            Zeroizing::new(
                std::fs::read_to_string(path).map_err(|source| KeyError::Io {
                    path: path.to_path_buf(),
                    source,
                })?,
            );
        let bytes = decode_tagged(&text, SECRET_TAG).ok_or_else(|| KeyError::Malformed {
            path: path.to_path_buf(),
            expected: SECRET_TAG,
        })?;
        let seed: Zeroizing<[u8; 32]> = Zeroizing::new(bytes.as_slice().try_into().map_err(
            |_| KeyError::Malformed {
                path: path.to_path_buf(),
                expected: SECRET_TAG,
            },
        )?);
        Ok(Self {
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// Writes the key to a new file, mode 0600. An existing file is never replaced.
    ///
    /// # Errors
    ///
    /// [`KeyError::Io`] when the file exists or cannot be written.
    pub fn write_new(&self, path: impl AsRef<Path>) -> Result<(), KeyError> {
        let seed = Zeroizing::new(self.key.to_bytes());
        let text = Zeroizing::new(format!("{SECRET_TAG} {}\n", B64.encode(seed.as_slice())));
        write_new_file(path.as_ref(), text.as_bytes(), 0o600)
    }

    /// The public half, for `verify`.
    pub fn verifying_key(&self) -> HeadVerifyingKey {
        HeadVerifyingKey {
            key: self.key.verifying_key(),
        }
    }

    /// An Ed25519 signature (base64) over `message`, for the other signed formats of this
    /// module's neighbours (checkpoints), each with a domain tag of its own.
    pub(super) fn sign_message(&self, message: &[u8]) -> String {
        B64.encode(self.key.sign(message).to_bytes())
    }

    /// Signs `head`.
    pub fn sign(&self, head: &ChainHead, signed_at: impl Into<String>) -> SignedHead {
        SignedHead {
            shard: super::default_shard(),
            count: head.count,
            hash: head.hash.clone(),
            key_id: self.verifying_key().key_id(),
            signature: self.sign_message(&message(head.count, &head.hash)),
            signed_at: signed_at.into(),
        }
    }
}

/// The public key that checks signed heads. Safe to share and print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadVerifyingKey {
    key: VerifyingKey,
}

impl HeadVerifyingKey {
    /// Reads a public key file (`sallyport-head-key-v1 <base64>`).
    ///
    /// # Errors
    ///
    /// [`KeyError::Io`] when the file cannot be read, [`KeyError::Malformed`] when it does not
    /// hold a public key.
    pub fn read_file(path: impl AsRef<Path>) -> Result<Self, KeyError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).ok_or_else(|| KeyError::Malformed {
            path: path.to_path_buf(),
            expected: PUBLIC_TAG,
        })
    }

    /// Parses the text of a public key file; `None` when it is not one.
    pub fn parse(text: &str) -> Option<Self> {
        let bytes = decode_tagged(text, PUBLIC_TAG)?;
        let bytes: [u8; 32] = bytes.as_slice().try_into().ok()?;
        VerifyingKey::from_bytes(&bytes)
            .ok()
            .map(|key| Self { key })
    }

    /// The text of a public key file (one line, with its newline).
    pub fn to_text(&self) -> String {
        format!("{PUBLIC_TAG} {}\n", B64.encode(self.key.as_bytes()))
    }

    /// Writes the public key to a new file (mode 0644). An existing file is never replaced.
    ///
    /// # Errors
    ///
    /// [`KeyError::Io`] when the file exists or cannot be written.
    pub fn write_new(&self, path: impl AsRef<Path>) -> Result<(), KeyError> {
        write_new_file(path.as_ref(), self.to_text().as_bytes(), 0o644)
    }

    /// A short name for the key: the first 16 hex digits of SHA-256 over the public key.
    /// Stored with every head it signed.
    pub fn key_id(&self) -> String {
        let digest = Sha256::digest(self.key.as_bytes());
        hex::encode(&digest[..8])
    }

    /// Whether `signature` (base64) is a valid signature by this key over `message`.
    pub(super) fn verifies_message(&self, message: &[u8], signature: &str) -> bool {
        let Ok(bytes) = B64.decode(signature) else {
            return false;
        };
        let Ok(signature) = Signature::from_slice(&bytes) else {
            return false;
        };
        self.key.verify_strict(message, &signature).is_ok()
    }

    /// Whether `head` carries a valid signature by this key over its own count and hash.
    pub fn verifies(&self, head: &SignedHead) -> bool {
        head.key_id == self.key_id()
            && self.verifies_message(&message(head.count, &head.hash), &head.signature)
    }
}

/// A chain head with its signature, as a journal stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SignedHead {
    /// The shard whose head it is ([`super::checkpoint::DEFAULT_SHARD`] unless stored in
    /// another; not signed over: each shard's chain starts from its own genesis, so a head
    /// moved to another shard matches none of its records).
    #[serde(
        default = "super::default_shard",
        skip_serializing_if = "super::is_default_shard"
    )]
    pub shard: String,
    /// How many records the chain held.
    pub count: u64,
    /// The hash of record `count`.
    pub hash: String,
    /// [`HeadVerifyingKey::key_id`] of the key that signed.
    pub key_id: String,
    /// The Ed25519 signature (base64) over the domain tag, `count` and `hash`.
    pub signature: String,
    /// When it was signed (RFC 3339).
    pub signed_at: String,
}

impl SignedHead {
    /// A head as read back from storage.
    pub fn from_stored(
        count: u64,
        hash: String,
        key_id: String,
        signature: String,
        signed_at: String,
    ) -> Self {
        Self {
            shard: super::default_shard(),
            count,
            hash,
            key_id,
            signature,
            signed_at,
        }
    }

    /// The same head, of the shard named `shard`.
    #[must_use]
    pub fn in_shard(mut self, shard: impl Into<String>) -> Self {
        self.shard = shard.into();
        self
    }
}

/// A key file problem. Never carries key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The file could not be read or written (an existing file is never replaced).
    #[error("cannot use key file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The file does not hold a key of the expected kind.
    #[error("{path} is not a key file (expected a line starting `{expected}`)")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The tag the file should start with.
        expected: &'static str,
    },
    /// A secret key file that group or others may read.
    #[error(
        "{path} has mode {mode:o}: a signing key must not be readable by group or others (chmod 600)"
    )]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The operating system gave no randomness.
    #[error("no randomness available to generate a key")]
    Random,
}

/// The bytes a head signature covers.
fn message(count: u64, hash: &str) -> Vec<u8> {
    format!("{MESSAGE_TAG}\n{count}\n{hash}").into_bytes()
}

fn decode_tagged(text: &str, tag: &str) -> Option<Zeroizing<Vec<u8>>> {
    let rest = text.trim().strip_prefix(tag)?.strip_prefix(' ')?;
    B64.decode(rest.trim()).ok().map(Zeroizing::new)
}

#[cfg(unix)]
fn check_private(path: &Path) -> Result<(), KeyError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::TooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path) -> Result<(), KeyError> {
    Ok(())
}

fn write_new_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), KeyError> {
    use std::io::Write as _;
    let io = |source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)
}

/// Checks the signed `heads` against the chain and records the result in `report`.
///
/// `chain[i]` is the stored hash of record `i + 1`, already checked by the backend's
/// `verify` (which produced `report`). Sets [`VerifyReport::last_signed`] to the highest
/// position a valid signature by `key` covers, and, when the chain itself is intact, sets the
/// first break to the first of:
///
/// * [`BreakKind::BadSignature`]: a head names this key but its signature does not verify
///   (forged or altered);
/// * [`BreakKind::HeadMismatch`]: a validly signed head no longer matches the record at its
///   position (records up to it were rewritten and rehashed);
/// * [`BreakKind::Deleted`]: a validly signed head is longer than the chain (truncated);
/// * [`BreakKind::Unsigned`]: records after the last head signed by this key (all of them
///   when none is): rewritten, or written without the key.
pub fn check_signed_heads(
    report: &mut VerifyReport,
    chain: &[String],
    heads: &[SignedHead],
    key: &HeadVerifyingKey,
) {
    check_signed(report, chain, heads, &[], key);
}

/// [`check_signed_heads`] with the signed checkpoints too ([`super::checkpoint`]): a
/// checkpoint validly signed by `key` covers the records up to its size as a signed head
/// does, and one that does not verify, no longer matches the chain, or is longer than the
/// chain is reported the same way (see [`super::checkpoint::check_checkpoints`]).
pub fn check_signed(
    report: &mut VerifyReport,
    chain: &[String],
    heads: &[SignedHead],
    checkpoints: &[super::checkpoint::Checkpoint],
    key: &HeadVerifyingKey,
) {
    check_signed_in(
        report,
        super::checkpoint::DEFAULT_SHARD,
        chain,
        heads,
        checkpoints,
        key,
    );
}

/// [`check_signed`] for the shard named `shard`, whose stored hashes are `chain`: `heads`
/// are that shard's, and each checkpoint's head of the shard is checked (a checkpoint made
/// before the shard had records, which names no head for it, covers none of them).
pub fn check_signed_in(
    report: &mut VerifyReport,
    shard: &str,
    chain: &[String],
    heads: &[SignedHead],
    checkpoints: &[super::checkpoint::Checkpoint],
    key: &HeadVerifyingKey,
) {
    check_signed_anchored(report, shard, None, chain, heads, checkpoints, key);
}

/// [`check_signed_in`] for a shard whose records up to `anchor` were pruned
/// ([`super::retention`]): `chain` holds the stored hashes of the records after it. A head
/// signed at the anchor's position is compared with the anchor's hash; one signed before it
/// covers only pruned records and is passed over (its signature still checked). The anchor
/// itself must match a checkpoint signed by `key` (see
/// [`super::checkpoint::check_checkpoints_anchored`]), or the report says so.
pub fn check_signed_anchored(
    report: &mut VerifyReport,
    shard: &str,
    anchor: Option<&super::retention::Anchor>,
    chain: &[String],
    heads: &[SignedHead],
    checkpoints: &[super::checkpoint::Checkpoint],
    key: &HeadVerifyingKey,
) {
    let key_id = key.key_id();
    let base = anchor.map_or(0, |a| a.seq);
    let n = base + chain.len() as u64;
    let genesis = anchor.map_or_else(|| super::chain::shard_genesis(shard), |a| a.hash.clone());
    let mut heads: Vec<&SignedHead> = heads.iter().collect();
    heads.sort_by_key(|h| h.count);
    let mut last_signed: Option<u64> = None;
    let mut problem: Option<ChainBreak> = None;
    let mut other_keys = 0_usize;
    for head in heads {
        if head.key_id != key_id {
            other_keys += 1;
            continue;
        }
        let found = |seq, kind, detail| ChainBreak {
            seq,
            kind,
            detail,
            attempt: None,
            shard: None,
        };
        if !key.verifies(head) {
            problem.get_or_insert_with(|| {
                found(
                    head.count,
                    BreakKind::BadSignature,
                    format!(
                        "the head stored for record {} does not carry a valid signature by key {key_id}: forged or altered",
                        head.count
                    ),
                )
            });
            continue;
        }
        if head.count > n {
            problem.get_or_insert_with(|| {
                found(
                    n + 1,
                    BreakKind::Deleted,
                    format!(
                        "a head signed over {} records, but the chain holds {n}: truncated",
                        head.count
                    ),
                )
            });
            continue;
        }
        if head.count < base {
            // Only pruned records: the seal covers them.
            continue;
        }
        let stored = usize::try_from(head.count - base)
            .ok()
            .and_then(|c| c.checked_sub(1))
            .and_then(|i| chain.get(i))
            .map_or(genesis.as_str(), String::as_str);
        if stored != head.hash {
            problem.get_or_insert_with(|| {
                found(
                    head.count,
                    BreakKind::HeadMismatch,
                    format!(
                        "record {} does not match the head signed at that position: records up to it were rewritten",
                        head.count
                    ),
                )
            });
            continue;
        }
        last_signed = Some(last_signed.map_or(head.count, |l| l.max(head.count)));
    }
    let checked =
        super::checkpoint::check_checkpoints_anchored(shard, anchor, chain, checkpoints, key);
    if let Some(last) = checked.last_signed {
        last_signed = Some(last_signed.map_or(last, |l| l.max(last)));
    }
    if problem.is_none() {
        problem = checked.problem;
    }
    report.last_signed = last_signed;
    if report.first_break.is_some() {
        return;
    }
    if let Some(problem) = problem {
        report.first_break = Some(problem);
        return;
    }
    let covered = last_signed.unwrap_or(0);
    if covered < n {
        let detail = match last_signed {
            None => format!(
                "no head in this journal is signed by key {key_id} ({other_keys} signed by other keys): records 1 to {n} are not covered by a signature"
            ),
            Some(last) => format!(
                "records {} to {n} come after the last head signed by key {key_id} (record {last}): they may have been rewritten or added without the key",
                last + 1
            ),
        };
        report.first_break = Some(ChainBreak {
            seq: covered + 1,
            kind: BreakKind::Unsigned,
            detail,
            attempt: None,
            shard: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::GENESIS_HASH;

    fn report(chain: &[String]) -> VerifyReport {
        VerifyReport {
            records: chain.len() as u64,
            head: ChainHead {
                count: chain.len() as u64,
                hash: chain.last().cloned().unwrap_or_else(|| GENESIS_HASH.into()),
            },
            first_break: None,
            last_signed: None,
            shards: Vec::new(),
        }
    }

    fn chain(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("{i:064x}")).collect()
    }

    fn head_at(chain: &[String], count: usize) -> ChainHead {
        ChainHead {
            count: count as u64,
            hash: chain[count - 1].clone(),
        }
    }

    #[test]
    fn a_chain_signed_to_its_end_verifies_and_reports_its_last_signed_position() {
        let key = HeadSigningKey::generate().expect("key");
        let c = chain(5);
        let heads = [
            key.sign(&head_at(&c, 2), "t"),
            key.sign(&head_at(&c, 5), "t"),
        ];
        let mut r = report(&c);
        check_signed_heads(&mut r, &c, &heads, &key.verifying_key());
        assert_eq!((r.first_break, r.last_signed), (None, Some(5)));
    }

    #[test]
    fn records_after_the_last_signed_head_are_reported_as_unsigned() {
        let key = HeadSigningKey::generate().expect("key");
        let c = chain(5);
        let heads = [key.sign(&head_at(&c, 3), "t")];
        let mut r = report(&c);
        check_signed_heads(&mut r, &c, &heads, &key.verifying_key());
        let brk = r.first_break.expect("break");
        assert_eq!(
            (brk.seq, brk.kind, r.last_signed),
            (4, BreakKind::Unsigned, Some(3))
        );
    }

    #[test]
    fn a_head_with_an_altered_hash_or_signature_is_reported_as_a_bad_signature() {
        let key = HeadSigningKey::generate().expect("key");
        let c = chain(3);
        let mut altered = key.sign(&head_at(&c, 3), "t");
        altered.hash = c[1].clone();
        altered.count = 2;
        let mut r = report(&c);
        check_signed_heads(&mut r, &c, &[altered], &key.verifying_key());
        let brk = r.first_break.expect("break");
        assert_eq!(
            (brk.seq, brk.kind, r.last_signed),
            (2, BreakKind::BadSignature, None)
        );
    }

    #[test]
    fn another_key_covers_nothing() {
        let key = HeadSigningKey::generate().expect("key");
        let other = HeadSigningKey::generate().expect("key");
        let c = chain(2);
        let heads = [key.sign(&head_at(&c, 2), "t")];
        let mut r = report(&c);
        check_signed_heads(&mut r, &c, &heads, &other.verifying_key());
        let brk = r.first_break.expect("break");
        assert_eq!(
            (brk.seq, brk.kind, r.last_signed),
            (1, BreakKind::Unsigned, None)
        );
        assert!(
            brk.detail.contains("1 signed by other keys"),
            "{}",
            brk.detail
        );
    }

    #[test]
    fn the_signing_key_prints_only_its_key_id() {
        let key = HeadSigningKey::generate().expect("key");
        let seed = key.key.to_bytes();
        let shown = format!("{key:?}");
        assert_eq!(
            shown,
            format!(
                "HeadSigningKey {{ key_id: {:?}, .. }}",
                key.verifying_key().key_id()
            )
        );
        assert!(!shown.contains(&hex::encode(seed)));
        assert!(!shown.contains(&B64.encode(seed)));
    }
}
