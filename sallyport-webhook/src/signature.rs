//! The `Sallyport-Signature` header: signing, parsing, and constant-time verification.
//!
//! The signed string is `"<t>.<raw body bytes>"`: the timestamp is inside the MAC, so a
//! sender cannot be replayed with a fresh timestamp, and the body is the exact bytes on the
//! wire, so a body changed after signing (even re-serialized to equal JSON) fails.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The header that carries the signature.
pub const SIGNATURE_HEADER: &str = "Sallyport-Signature";

/// The length of a `v1` signature in hex characters (HMAC-SHA256: 32 bytes).
const V1_HEX_LEN: usize = 64;

/// The longest header value read; anything longer is malformed.
const MAX_HEADER_LEN: usize = 512;

type HmacSha256 = Hmac<Sha256>;

/// The `Sallyport-Signature` header value for `body` sent at Unix time `t` (seconds):
/// `t=<t>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
///
/// For senders (a bot, a ticketing system's hook) and tests. `body` is the exact bytes the
/// request will carry.
///
/// ```
/// let header = sallyport_webhook::sign(b"s3cret-shared-with-the-bot", 1_767_225_600, br#"{"approval_id":"apr_1"}"#);
/// assert!(header.starts_with("t=1767225600,v1="));
/// assert_eq!(header.len(), "t=1767225600,v1=".len() + 64);
/// ```
pub fn sign(secret: &[u8], t: u64, body: &[u8]) -> String {
    let tag = mac(secret, t, body).finalize().into_bytes();
    format!("t={t},v1={}", hex::encode(tag))
}

/// The MAC over `"<t>.<body>"`, not yet finalized.
fn mac(secret: &[u8], t: u64, body: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length (longer keys are hashed first), so this cannot fail.
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of every length"));
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// A parsed `Sallyport-Signature` header.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SignatureHeader {
    /// The signed timestamp, Unix seconds.
    pub(crate) t: u64,
    /// The `v1` MAC.
    pub(crate) v1: [u8; 32],
}

impl std::fmt::Debug for SignatureHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The MAC is not a secret, but it is never echoed either.
        f.debug_struct("SignatureHeader")
            .field("t", &self.t)
            .finish_non_exhaustive()
    }
}

impl SignatureHeader {
    /// Parses `t=<digits>,v1=<64 hex>`: elements separated by commas, each `key=value`,
    /// `t` and `v1` exactly once each; elements with other keys are ignored (room for a
    /// later scheme next to `v1`).
    ///
    /// Returns a sentence saying what is wrong; it quotes nothing from the header.
    pub(crate) fn parse(value: &str) -> Result<Self, &'static str> {
        if value.len() > MAX_HEADER_LEN {
            return Err("the Sallyport-Signature header is longer than 512 bytes");
        }
        let mut t = None;
        let mut v1 = None;
        for element in value.split(',') {
            let Some((key, val)) = element.trim().split_once('=') else {
                return Err("the Sallyport-Signature header is `t=<unix seconds>,v1=<hex>`");
            };
            match key {
                "t" => {
                    if t.is_some() {
                        return Err("the Sallyport-Signature header has more than one `t`");
                    }
                    if val.is_empty() || val.len() > 20 || !val.bytes().all(|b| b.is_ascii_digit())
                    {
                        return Err("`t` in the Sallyport-Signature header is Unix seconds");
                    }
                    t = Some(
                        val.parse::<u64>()
                            .map_err(|_| "`t` in the Sallyport-Signature header is Unix seconds")?,
                    );
                }
                "v1" => {
                    if v1.is_some() {
                        return Err("the Sallyport-Signature header has more than one `v1`");
                    }
                    let mut tag = [0u8; 32];
                    if val.len() != V1_HEX_LEN || hex::decode_to_slice(val, &mut tag).is_err() {
                        return Err(
                            "`v1` in the Sallyport-Signature header is 64 hex digits (HMAC-SHA256)",
                        );
                    }
                    v1 = Some(tag);
                }
                _ => {}
            }
        }
        match (t, v1) {
            (Some(t), Some(v1)) => Ok(Self { t, v1 }),
            (None, _) => Err("the Sallyport-Signature header has no `t`"),
            (_, None) => Err("the Sallyport-Signature header has no `v1`"),
        }
    }

    /// Whether `v1` is the MAC of `body` at `t` under `secret`, compared in constant time.
    pub(crate) fn verifies(&self, secret: &[u8], body: &[u8]) -> bool {
        mac(secret, self.t, body).verify_slice(&self.v1).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 4231 test case 2 fixes HMAC-SHA256 itself; this pins our signed string on top.
    #[test]
    fn hmac_sha256_matches_rfc_4231_case_2() {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(b"Jefe").expect("key");
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn the_signed_string_is_timestamp_dot_body() {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(b"k").expect("key");
        mac.update(b"42.{\"a\":1}");
        let expected = format!("t=42,v1={}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(sign(b"k", 42, b"{\"a\":1}"), expected);
    }

    #[test]
    fn a_signed_header_parses_and_verifies_only_for_its_secret_time_and_body() {
        let header = sign(b"secret-one", 1_700_000_000, b"body");
        let parsed = SignatureHeader::parse(&header).expect("parse");
        assert_eq!(parsed.t, 1_700_000_000);
        assert!(parsed.verifies(b"secret-one", b"body"));
        assert!(!parsed.verifies(b"secret-two", b"body"));
        assert!(!parsed.verifies(b"secret-one", b"body "));
        let moved = SignatureHeader {
            t: parsed.t + 1,
            ..parsed
        };
        assert!(!moved.verifies(b"secret-one", b"body"));
    }

    #[test]
    fn element_order_spaces_and_unknown_keys_are_accepted() {
        let header = sign(b"k", 7, b"x");
        let (t, v1) = header.split_once(',').expect("two elements");
        let reordered = format!("{v1}, v0=abc, {t}");
        let parsed = SignatureHeader::parse(&reordered).expect("parse");
        assert!(parsed.verifies(b"k", b"x"));
    }

    #[test]
    fn malformed_headers_are_refused_with_a_sentence_that_quotes_nothing() {
        let good_v1 = "a".repeat(64);
        for bad in [
            String::new(),
            "t=1".to_owned(),
            format!("v1={good_v1}"),
            format!("t=,v1={good_v1}"),
            format!("t=-1,v1={good_v1}"),
            format!("t=1e9,v1={good_v1}"),
            format!("t=99999999999999999999999,v1={good_v1}"),
            format!("t=1,t=2,v1={good_v1}"),
            format!("t=1,v1={good_v1},v1={good_v1}"),
            "t=1,v1=abc".to_owned(),
            format!("t=1,v1={}", "g".repeat(64)),
            format!("t=1,v1={good_v1}0"),
            format!("t=1;v1={good_v1}"),
            format!("t=1,v1={good_v1},{}", "x=y".repeat(200)),
        ] {
            let reason = SignatureHeader::parse(&bad).expect_err(&bad);
            assert!(!reason.contains(&good_v1), "{reason}");
        }
    }

    #[test]
    fn debug_does_not_print_the_mac() {
        let parsed = SignatureHeader::parse(&sign(b"k", 7, b"x")).expect("parse");
        let shown = format!("{parsed:?}");
        assert!(!shown.contains(&hex::encode(parsed.v1)), "{shown}");
        assert!(shown.contains("t: 7"), "{shown}");
    }
}
