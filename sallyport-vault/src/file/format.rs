//! The vault file format, version 1: magic, version, JSON body, SHA-256 trailer (see the
//! module documentation of [`super`]), the boxes the body holds and the associated data each
//! box is sealed with.
//!
//! Knows nothing of paths or of the file itself: [`encode`] and [`decode`] work on bytes, and
//! a decoding failure is a [`FormatError`] that the vault turns into a `VaultError` naming
//! its file.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::crypto::{self, KEY_LEN, KdfParams};
use sallyport_kernel::vault::{Credential, CredentialMeta, Grant, Secret, VaultError};

/// The vault file format this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;

const MAGIC: &[u8; 16] = b"SALLYPORT-VAULT\n";
const PREFIX_LEN: usize = MAGIC.len() + 4;
const TRAILER_LEN: usize = 32;

/// What the check box seals: opening it proves the passphrase.
pub(super) const CHECK_PLAINTEXT: &[u8] = b"sallyport vault key check v1";

/// The key derivation header: algorithm, version, parameters and salt, in the clear.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KdfHeader {
    algorithm: String,
    version: u32,
    memory_kib: u32,
    iterations: u32,
    parallelism: u32,
    salt: String,
}

impl KdfHeader {
    /// The header of a new vault: Argon2id version 0x13 with `params` over `salt`.
    pub(super) fn argon2id(params: KdfParams, salt: &[u8]) -> Self {
        Self {
            algorithm: "argon2id".into(),
            version: 0x13,
            memory_kib: params.memory_kib,
            iterations: params.iterations,
            parallelism: params.parallelism,
            salt: STANDARD.encode(salt),
        }
    }

    /// The parameters the header asks for (not yet checked against the caps).
    pub(super) fn params(&self) -> KdfParams {
        KdfParams::new(self.memory_kib, self.iterations, self.parallelism)
    }

    /// The salt, when it decodes and is 8 to 64 bytes long.
    pub(super) fn salt(&self) -> Option<Vec<u8>> {
        match STANDARD.decode(&self.salt) {
            Ok(salt) if (8..=64).contains(&salt.len()) => Some(salt),
            _ => None,
        }
    }
}

/// A nonce and a ciphertext, both base64.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SealedBox {
    nonce: String,
    ciphertext: String,
}

impl SealedBox {
    /// Seals `plaintext` with `aad` under a fresh nonce.
    pub(super) fn seal(
        key: &[u8; KEY_LEN],
        plaintext: &[u8],
        aad: &[u8],
    ) -> Result<Self, VaultError> {
        let (nonce, ciphertext) = crypto::seal(key, plaintext, aad)?;
        Ok(Self {
            nonce: STANDARD.encode(nonce),
            ciphertext: STANDARD.encode(ciphertext),
        })
    }

    /// Opens the box; `Err(())` when it does not decode or authenticate.
    pub(super) fn open(&self, key: &[u8; KEY_LEN], aad: &[u8]) -> Result<Zeroizing<Vec<u8>>, ()> {
        open_base64(key, &self.nonce, &self.ciphertext, aad)
    }
}

/// One sealed credential, with the id and version it is bound to.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RecordBox {
    /// The record's random id (hex), stable across versions.
    pub(super) id: String,
    /// The credential's version.
    pub(super) version: u64,
    nonce: String,
    ciphertext: String,
}

impl RecordBox {
    /// Seals `credential` (name, kind, binding and value) and its OAuth grant, if any, as
    /// record `record_id` of vault `vault_id`, bound to the credential's current version.
    pub(super) fn seal(
        key: &[u8; KEY_LEN],
        vault_id: &str,
        record_id: &str,
        credential: &Credential,
        grant: Option<&Grant>,
        subjects: &BTreeMap<String, Grant>,
    ) -> Result<Self, VaultError> {
        let version = credential.meta().version;
        let secret = credential.secret();
        let plain = RecordOut {
            meta: credential.meta(),
            secret: secret.expose(),
            passphrase: secret.expose_passphrase(),
            grant: grant.map(GrantOut::of),
            subject_grants: subjects
                .iter()
                .map(|(s, g)| (s.as_str(), GrantOut::of(g)))
                .collect(),
        };
        // Room for the worst-case JSON escaping, so the buffer never reallocates and
        // leaves an unzeroized copy behind.
        let grant_len = |g: &Grant| {
            g.secrets().map(str::len).sum::<usize>()
                + g.reconnect_reason().map_or(0, str::len)
                + 128
        };
        let grants_len = grant.map_or(0, grant_len)
            + subjects
                .iter()
                .map(|(s, g)| s.len() + grant_len(g))
                .sum::<usize>();
        let capacity = 1024
            + 6 * (secret.expose().len() + secret.expose_passphrase().map_or(0, str::len))
            + 6 * grants_len
            + 6 * serde_json::to_string(credential.meta()).map_or(0, |m| m.len());
        let mut buf = Zeroizing::new(Vec::with_capacity(capacity));
        serde_json::to_writer(&mut *buf, &plain)
            .map_err(|_| VaultError::Backend("cannot encode a record".into()))?;
        let sealed = SealedBox::seal(key, &buf, &record_aad(vault_id, record_id, version))?;
        Ok(Self {
            id: record_id.to_owned(),
            version,
            nonce: sealed.nonce,
            ciphertext: sealed.ciphertext,
        })
    }

    /// Opens the record of vault `vault_id`; `Err(())` when it does not decode or
    /// authenticate (moved from another record, vault or version).
    pub(super) fn open(
        &self,
        key: &[u8; KEY_LEN],
        vault_id: &str,
    ) -> Result<Zeroizing<Vec<u8>>, ()> {
        open_base64(
            key,
            &self.nonce,
            &self.ciphertext,
            &record_aad(vault_id, &self.id, self.version),
        )
    }
}

fn open_base64(
    key: &[u8; KEY_LEN],
    nonce: &str,
    ciphertext: &str,
    aad: &[u8],
) -> Result<Zeroizing<Vec<u8>>, ()> {
    let nonce = STANDARD.decode(nonce).map_err(drop)?;
    let ciphertext = STANDARD.decode(ciphertext).map_err(drop)?;
    crypto::open(key, &nonce, &ciphertext, aad)
}

/// The JSON body between the version and the trailer.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Body {
    pub(super) vault_id: String,
    pub(super) kdf: KdfHeader,
    pub(super) check: SealedBox,
    pub(super) manifest: SealedBox,
    pub(super) records: Vec<RecordBox>,
}

/// The sealed list of record ids and versions.
#[derive(Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(super) struct Manifest {
    pub(super) records: Vec<(String, u64)>,
}

/// A record's plaintext, borrowed for sealing.
#[derive(Serialize)]
struct RecordOut<'a> {
    meta: &'a CredentialMeta,
    secret: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    passphrase: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grant: Option<GrantOut<'a>>,
    /// The grants of a credential held for each subject, by subject. Records without any
    /// (every record before them) are written exactly as before.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    subject_grants: BTreeMap<&'a str, GrantOut<'a>>,
}

/// An OAuth grant inside a record's plaintext, borrowed for sealing. Records without one
/// (every record of the kinds before OAuth) are written exactly as before.
#[derive(Serialize)]
struct GrantOut<'a> {
    version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    access_token: Option<&'a str>,
    issued_at_ms: u64,
    expires_at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    refresh_token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reconnect: Option<&'a str>,
    /// The scopes the provider granted, when recorded (a grant without them is written
    /// exactly as before).
    #[serde(skip_serializing_if = "Option::is_none")]
    scopes: Option<&'a [String]>,
}

impl<'a> GrantOut<'a> {
    fn of(g: &'a Grant) -> Self {
        Self {
            version: g.version(),
            access_token: g.access_token().map(Secret::expose),
            issued_at_ms: g.issued_at_ms(),
            expires_at_ms: g.expires_at_ms(),
            refresh_token: g.refresh_token().map(Secret::expose),
            reconnect: g.reconnect_reason(),
            scopes: g.scopes(),
        }
    }
}

/// An OAuth grant after opening; the strings move into `Secret`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GrantIn {
    version: u64,
    #[serde(default)]
    access_token: Option<String>,
    issued_at_ms: u64,
    expires_at_ms: u64,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    reconnect: Option<String>,
    #[serde(default)]
    scopes: Option<Vec<String>>,
}

impl GrantIn {
    /// The grant, its token strings moved into secrets.
    pub(super) fn into_grant(self) -> Grant {
        Grant::from_parts(
            self.version,
            self.access_token.map(Secret::new),
            self.issued_at_ms,
            self.expires_at_ms,
            self.refresh_token.map(Secret::new),
            self.reconnect,
        )
        .with_scopes(self.scopes)
    }
}

/// A record's plaintext, owned after opening; the strings move into `Secret`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RecordIn {
    pub(super) meta: CredentialMeta,
    pub(super) secret: String,
    #[serde(default)]
    pub(super) passphrase: Option<String>,
    #[serde(default)]
    pub(super) grant: Option<GrantIn>,
    #[serde(default)]
    pub(super) subject_grants: BTreeMap<String, GrantIn>,
}

/// Associated data of the check box: the vault id and the whole KDF header.
pub(super) fn check_aad(vault_id: &str, kdf: &KdfHeader) -> Vec<u8> {
    format!(
        "sallyport-vault\0v1\0check\0{vault_id}\0argon2id\0{}\0{}\0{}\0{}\0{}",
        kdf.version, kdf.memory_kib, kdf.iterations, kdf.parallelism, kdf.salt
    )
    .into_bytes()
}

/// Associated data of the manifest box.
pub(super) fn manifest_aad(vault_id: &str) -> Vec<u8> {
    format!("sallyport-vault\0v1\0manifest\0{vault_id}").into_bytes()
}

fn record_aad(vault_id: &str, record_id: &str, version: u64) -> Vec<u8> {
    format!("sallyport-vault\0v1\0record\0{vault_id}\0{record_id}\0{version}").into_bytes()
}

/// Why bytes are not a vault file this build can read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum FormatError {
    /// No vault magic.
    NotAVault,
    /// A format version newer than [`FORMAT_VERSION`].
    NewerFormat(u32),
    /// Damaged or truncated, in a few words.
    Corrupt(String),
}

/// The file's bytes for `body`: magic, version, JSON, SHA-256 of everything before it.
pub(super) fn encode(body: &Body) -> Result<Vec<u8>, serde_json::Error> {
    let mut bytes = Vec::with_capacity(4096);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    serde_json::to_writer(&mut bytes, body)?;
    let digest = Sha256::digest(&bytes);
    bytes.extend_from_slice(&digest);
    Ok(bytes)
}

/// The body of a vault file, after the structural checks, in the order that gives the most
/// useful error. The KDF parameters are checked against the caps here, before any key is
/// derived.
pub(super) fn decode(bytes: &[u8]) -> Result<Body, FormatError> {
    let corrupt = |detail: &str| FormatError::Corrupt(detail.to_owned());
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        if MAGIC.starts_with(bytes) && !bytes.is_empty() {
            return Err(corrupt("truncated inside the header"));
        }
        return Err(FormatError::NotAVault);
    }
    if bytes.len() < PREFIX_LEN {
        return Err(corrupt("truncated inside the header"));
    }
    let mut version = [0u8; 4];
    version.copy_from_slice(&bytes[MAGIC.len()..PREFIX_LEN]);
    let version = u32::from_le_bytes(version);
    if version > FORMAT_VERSION {
        return Err(FormatError::NewerFormat(version));
    }
    if version == 0 {
        return Err(corrupt("format version 0"));
    }
    if bytes.len() < PREFIX_LEN + TRAILER_LEN {
        return Err(corrupt("truncated"));
    }
    let (content, trailer) = bytes.split_at(bytes.len() - TRAILER_LEN);
    if Sha256::digest(content).as_slice() != trailer {
        return Err(corrupt("checksum mismatch: truncated or modified"));
    }
    let body: Body =
        serde_json::from_slice(&content[PREFIX_LEN..]).map_err(|_| corrupt("malformed body"))?;
    if body.kdf.algorithm != "argon2id" || body.kdf.version != 0x13 {
        return Err(corrupt("unknown key derivation"));
    }
    // Checked before any key is derived: the header is not authenticated yet, and a
    // crafted one must not make this unlock allocate or compute without bound.
    if let Some(reason) = body.kdf.params().out_of_range() {
        return Err(FormatError::Corrupt(format!(
            "the key derivation header asks for more than this build accepts: argon2 {reason}"
        )));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sallyport_kernel::vault::{Binding, CredentialKind, Secret};

    const KEY: [u8; KEY_LEN] = [7; KEY_LEN];

    fn body() -> Body {
        let kdf = KdfHeader::argon2id(KdfParams::new(8, 1, 1), b"0123456789abcdef");
        let credential = Credential::new(
            CredentialMeta::new(
                "deploy-api",
                CredentialKind::Bearer,
                Binding::url("https://api.example.com"),
            ),
            Secret::new("tok-en \"quoted\""),
        );
        let record = RecordBox::seal(&KEY, "vid", "rid", &credential, None, &BTreeMap::new())
            .expect("seal record");
        Body {
            vault_id: "vid".into(),
            check: SealedBox::seal(&KEY, CHECK_PLAINTEXT, &check_aad("vid", &kdf)).expect("seal"),
            kdf,
            manifest: SealedBox::seal(&KEY, b"{}", &manifest_aad("vid")).expect("seal"),
            records: vec![record],
        }
    }

    #[test]
    fn an_encoded_body_decodes_to_the_same_boxes() {
        let body = body();
        let bytes = encode(&body).expect("encode");
        assert_eq!(&bytes[..16], b"SALLYPORT-VAULT\n");
        assert_eq!(&bytes[16..20], &1u32.to_le_bytes());
        let decoded = decode(&bytes).expect("decode");
        assert_eq!(decoded.vault_id, "vid");
        assert_eq!(decoded.kdf, body.kdf);
        assert_eq!(
            decoded.kdf.salt().as_deref(),
            Some(&b"0123456789abcdef"[..])
        );
        assert_eq!(decoded.records.len(), 1);
        let plain = decoded.records[0].open(&KEY, "vid").expect("record opens");
        // A record without subject grants is written as before them.
        assert!(!String::from_utf8_lossy(&plain).contains("subject_grants"));
        let record: RecordIn = serde_json::from_slice(&plain).expect("record JSON");
        assert_eq!(record.meta.name, "deploy-api");
        assert_eq!(record.secret, "tok-en \"quoted\"");
        assert_eq!(record.passphrase, None);
        assert_eq!(
            decoded
                .check
                .open(&KEY, &check_aad("vid", &decoded.kdf))
                .expect("check opens")
                .as_slice(),
            CHECK_PLAINTEXT
        );
    }

    #[test]
    fn a_record_opens_only_in_its_own_vault_id_and_version() {
        let body = body();
        let mut record = body.records[0].clone();
        assert_eq!(record.open(&KEY, "another-vault"), Err(()));
        record.version += 1;
        assert_eq!(record.open(&KEY, "vid"), Err(()));
        let mut moved = body.records[0].clone();
        moved.id = "other-record".into();
        assert_eq!(moved.open(&KEY, "vid"), Err(()));
    }

    #[test]
    fn decoding_names_what_is_wrong() {
        let bytes = encode(&body()).expect("encode");
        assert_eq!(decode(b"").map(drop), Err(FormatError::NotAVault));
        assert_eq!(
            decode(b"{\"json\": 1}").map(drop),
            Err(FormatError::NotAVault)
        );
        assert_eq!(
            decode(&bytes[..10]).map(drop),
            Err(FormatError::Corrupt("truncated inside the header".into()))
        );
        assert_eq!(
            decode(&bytes[..18]).map(drop),
            Err(FormatError::Corrupt("truncated inside the header".into()))
        );
        assert_eq!(
            decode(&bytes[..bytes.len() - 1]).map(drop),
            Err(FormatError::Corrupt(
                "checksum mismatch: truncated or modified".into()
            ))
        );
        let mut newer = bytes.clone();
        newer[16..20].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(decode(&newer).map(drop), Err(FormatError::NewerFormat(2)));
        let mut zero = bytes;
        zero[16..20].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            decode(&zero).map(drop),
            Err(FormatError::Corrupt("format version 0".into()))
        );
    }

    #[test]
    fn a_header_over_the_caps_is_refused_before_any_key_is_derived() {
        let mut body = body();
        body.kdf.memory_kib = KdfParams::MAX_MEMORY_KIB + 1;
        let bytes = encode(&body).expect("encode");
        assert_eq!(
            decode(&bytes).map(drop),
            Err(FormatError::Corrupt(
                "the key derivation header asks for more than this build accepts: argon2 \
                 memory_kib 2097153 exceeds the cap of 2097152 KiB (2 GiB)"
                    .into()
            ))
        );
    }
}
