//! The file vault's cryptography: Argon2id parameters and their caps, key derivation,
//! XChaCha20-Poly1305 sealing, and the system random number generator.
//!
//! A leaf: it knows nothing of the file format or the file. What is sealed and with which
//! associated data is the format's business (`format.rs`).

use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use sallyport_kernel::vault::VaultError;

/// Length of the vault key in bytes.
pub(super) const KEY_LEN: usize = 32;

/// Length of an XChaCha20-Poly1305 nonce in bytes.
pub(super) const NONCE_LEN: usize = 24;

/// The vault key, zeroized when dropped.
pub(super) type Key = Zeroizing<[u8; KEY_LEN]>;

/// Argon2id parameters for deriving the vault key from the passphrase. Stored in the file
/// header, so a vault keeps opening after the defaults change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct KdfParams {
    /// Memory in KiB (default 65 536 = 64 MiB).
    pub memory_kib: u32,
    /// Passes over the memory (default 3).
    pub iterations: u32,
    /// Lanes (default 1).
    pub parallelism: u32,
}

impl Default for KdfParams {
    /// 64 MiB, 3 passes, 1 lane: about a quarter of a second on a current laptop core (RFC 9106
    /// second recommended option, single lane).
    fn default() -> Self {
        Self {
            memory_kib: 64 * 1024,
            iterations: 3,
            parallelism: 1,
        }
    }
}

impl KdfParams {
    /// Parameters with `memory_kib` KiB, `iterations` passes and `parallelism` lanes.
    /// Checked when a vault is created ([`KdfParams::check`]).
    pub fn new(memory_kib: u32, iterations: u32, parallelism: u32) -> Self {
        Self {
            memory_kib,
            iterations,
            parallelism,
        }
    }

    /// The most memory a vault may ask Argon2id for: 2 GiB (RFC 9106's first recommended
    /// option). A vault file's header is read before anything authenticates it, so every
    /// parameter is capped before a key is derived: a crafted header cannot make an unlock
    /// allocate or compute without bound.
    pub const MAX_MEMORY_KIB: u32 = 2 * 1024 * 1024;
    /// The most passes over the memory a vault may ask for.
    pub const MAX_ITERATIONS: u32 = 16;
    /// The most lanes a vault may ask for.
    pub const MAX_PARALLELISM: u32 = 16;
    /// The most work a vault may ask for, as memory (KiB) times passes: 4 GiB-passes, so
    /// 2 GiB × 2, 1 GiB × 4 or 256 MiB × 16 (the default is 64 MiB × 3).
    pub const MAX_MEMORY_PASSES_KIB: u64 = 4 * 1024 * 1024;

    /// Checks the parameters against the caps: memory from 8 KiB per lane up to
    /// [`MAX_MEMORY_KIB`](Self::MAX_MEMORY_KIB), 1 to [`MAX_ITERATIONS`](Self::MAX_ITERATIONS)
    /// passes, 1 to [`MAX_PARALLELISM`](Self::MAX_PARALLELISM) lanes, and memory times passes
    /// at most [`MAX_MEMORY_PASSES_KIB`](Self::MAX_MEMORY_PASSES_KIB).
    ///
    /// # Errors
    ///
    /// [`VaultError::Invalid`] naming the parameter, its value and the cap it breaks.
    pub fn check(&self) -> Result<(), VaultError> {
        self.out_of_range().map_or(Ok(()), |reason| {
            Err(VaultError::Invalid(format!("argon2 {reason}")))
        })
    }

    /// Which parameter breaks which cap, in words naming the header field; `None` when all
    /// are within the caps.
    pub(super) fn out_of_range(&self) -> Option<String> {
        let Self {
            memory_kib,
            iterations,
            parallelism,
        } = *self;
        if !(1..=Self::MAX_PARALLELISM).contains(&parallelism) {
            return Some(format!(
                "parallelism {parallelism} is outside the accepted 1 to {} lanes",
                Self::MAX_PARALLELISM
            ));
        }
        if !(1..=Self::MAX_ITERATIONS).contains(&iterations) {
            return Some(format!(
                "iterations {iterations} is outside the accepted 1 to {} passes",
                Self::MAX_ITERATIONS
            ));
        }
        let floor = 8 * parallelism;
        if memory_kib < floor {
            return Some(format!(
                "memory_kib {memory_kib} is below the floor of {floor} KiB (8 KiB per lane)"
            ));
        }
        if memory_kib > Self::MAX_MEMORY_KIB {
            return Some(format!(
                "memory_kib {memory_kib} exceeds the cap of {} KiB (2 GiB)",
                Self::MAX_MEMORY_KIB
            ));
        }
        let work = u64::from(memory_kib) * u64::from(iterations);
        if work > Self::MAX_MEMORY_PASSES_KIB {
            return Some(format!(
                "memory_kib {memory_kib} times iterations {iterations} is {work} KiB-passes, \
                 over the cap of {} KiB-passes (4 GiB-passes)",
                Self::MAX_MEMORY_PASSES_KIB
            ));
        }
        None
    }
}

/// `N` bytes from the system random number generator.
pub(super) fn random_bytes<const N: usize>() -> Result<[u8; N], VaultError> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf)
        .map_err(|_| VaultError::Backend("the system random number generator failed".into()))?;
    Ok(buf)
}

/// Derives the vault key from `passphrase` with Argon2id (version 0x13) over `salt`.
///
/// Callers check `params` against the caps first ([`KdfParams::out_of_range`]); this only
/// refuses what the Argon2 implementation itself refuses.
pub(super) fn derive_key(
    passphrase: &str,
    params: &KdfParams,
    salt: &[u8],
) -> Result<Key, VaultError> {
    let params = argon2::Params::new(
        params.memory_kib,
        params.iterations,
        params.parallelism,
        Some(KEY_LEN),
    )
    .map_err(|_| VaultError::Invalid("argon2 parameters out of range".into()))?;
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    argon
        .hash_password_into(passphrase.as_bytes(), salt, &mut *key)
        .map_err(|_| VaultError::Backend("key derivation failed".into()))?;
    Ok(key)
}

fn cipher(key: &[u8; KEY_LEN]) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(&(*key).into())
}

/// Seals `plaintext` with `aad` under a fresh random nonce: `(nonce, ciphertext)`.
pub(super) fn seal(
    key: &[u8; KEY_LEN],
    plaintext: &[u8],
    aad: &[u8],
) -> Result<([u8; NONCE_LEN], Vec<u8>), VaultError> {
    let nonce_bytes = random_bytes::<NONCE_LEN>()?;
    let nonce = XNonce::from(nonce_bytes);
    let ciphertext = cipher(key)
        .encrypt(
            &nonce,
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .map_err(|_| VaultError::Backend("encryption failed".into()))?;
    Ok((nonce_bytes, ciphertext))
}

/// Opens what [`seal`] sealed; `Err(())` when the nonce has the wrong length or the
/// ciphertext, key or associated data do not authenticate.
pub(super) fn open(
    key: &[u8; KEY_LEN],
    nonce: &[u8],
    ciphertext: &[u8],
    aad: &[u8],
) -> Result<Zeroizing<Vec<u8>>, ()> {
    let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(drop)?;
    cipher(key)
        .decrypt(
            &XNonce::from(nonce),
            Payload {
                msg: ciphertext,
                aad,
            },
        )
        .map(Zeroizing::new)
        .map_err(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest parameters the caps accept, so the tests derive keys quickly.
    fn small() -> KdfParams {
        KdfParams::new(8, 1, 1)
    }

    #[test]
    fn sealed_bytes_open_only_with_the_same_key_and_associated_data() {
        let key = derive_key("correct horse", &small(), b"saltsalt").expect("key");
        let other = derive_key("wrong horse", &small(), b"saltsalt").expect("key");
        let (nonce, ciphertext) = seal(&key, b"the plaintext", b"aad one").expect("seal");
        let opened = open(&key, &nonce, &ciphertext, b"aad one").expect("open");
        assert_eq!(opened.as_slice(), b"the plaintext");
        assert_eq!(open(&key, &nonce, &ciphertext, b"aad two"), Err(()));
        assert_eq!(open(&other, &nonce, &ciphertext, b"aad one"), Err(()));
        assert_eq!(open(&key, &nonce[..23], &ciphertext, b"aad one"), Err(()));
        let mut flipped = ciphertext;
        flipped[0] ^= 1;
        assert_eq!(open(&key, &nonce, &flipped, b"aad one"), Err(()));
    }

    #[test]
    fn each_seal_draws_a_fresh_nonce() {
        let key = derive_key("correct horse", &small(), b"saltsalt").expect("key");
        let (a, _) = seal(&key, b"same", b"aad").expect("seal");
        let (b, _) = seal(&key, b"same", b"aad").expect("seal");
        assert_ne!(a, b);
    }

    #[test]
    fn the_key_depends_on_passphrase_salt_and_parameters() {
        let key = derive_key("correct horse", &small(), b"saltsalt").expect("key");
        let again = derive_key("correct horse", &small(), b"saltsalt").expect("key");
        let salted = derive_key("correct horse", &small(), b"pepper!!").expect("key");
        let harder =
            derive_key("correct horse", &KdfParams::new(16, 1, 1), b"saltsalt").expect("key");
        assert_eq!(*key, *again);
        assert_ne!(*key, *salted);
        assert_ne!(*key, *harder);
    }

    #[test]
    fn the_caps_name_the_parameter_that_breaks_them() {
        assert_eq!(KdfParams::default().out_of_range(), None);
        assert_eq!(
            KdfParams::new(8, 1, 0).out_of_range().as_deref(),
            Some("parallelism 0 is outside the accepted 1 to 16 lanes")
        );
        assert_eq!(
            KdfParams::new(8, 17, 1).out_of_range().as_deref(),
            Some("iterations 17 is outside the accepted 1 to 16 passes")
        );
        assert_eq!(
            KdfParams::new(15, 1, 2).out_of_range().as_deref(),
            Some("memory_kib 15 is below the floor of 16 KiB (8 KiB per lane)")
        );
        assert_eq!(
            KdfParams::new(KdfParams::MAX_MEMORY_KIB + 1, 1, 1)
                .out_of_range()
                .as_deref(),
            Some("memory_kib 2097153 exceeds the cap of 2097152 KiB (2 GiB)")
        );
        assert_eq!(
            KdfParams::new(KdfParams::MAX_MEMORY_KIB, 3, 1)
                .out_of_range()
                .as_deref(),
            Some(
                "memory_kib 2097152 times iterations 3 is 6291456 KiB-passes, over the cap of \
                 4194304 KiB-passes (4 GiB-passes)"
            )
        );
        assert!(matches!(
            KdfParams::new(8, 0, 1).check(),
            Err(VaultError::Invalid(m)) if m == "argon2 iterations 0 is outside the accepted 1 to 16 passes"
        ));
    }
}
