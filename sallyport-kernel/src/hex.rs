//! Lowercase hex for the hashes the kernel writes on every call (the chain hash, the
//! intent's fingerprint).

/// `bytes` as lowercase hex, two digits a byte: what `hex::encode` gives, written through a
/// table instead of its per-character iterator (the chain hash and the intent's
/// fingerprint are encoded on every call).
pub(crate) fn hex_lower(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::hex_lower;

    #[test]
    fn hex_lower_matches_the_hex_crate() {
        let every_byte: Vec<u8> = (0..=255).collect();
        assert_eq!(hex_lower(&every_byte), hex::encode(&every_byte));
        assert_eq!(hex_lower(&[]), "");
        assert_eq!(hex_lower(&[0x0a, 0xf0]), "0af0");
    }
}
