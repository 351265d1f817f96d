//! The ID token's checks: its signature with the provider's published keys (a JSON Web Key
//! Set), then its issuer, audience, expiry, nonce and subject.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::Failure;

/// The clock difference tolerated between the console and the provider, in seconds.
const LEEWAY_S: u64 = 60;

/// A JSON Web Key Set (RFC 7517): the provider's public keys.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct Jwks {
    #[serde(default)]
    keys: Vec<Jwk>,
}

/// One public key of a [`Jwks`] (the members the console reads).
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct Jwk {
    #[serde(default)]
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default, rename = "use")]
    use_: Option<String>,
    #[serde(default)]
    alg: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

/// What an ID token must say.
pub(crate) struct Expected<'a> {
    pub(crate) issuer: &'a str,
    pub(crate) client_id: &'a str,
    pub(crate) nonce: &'a str,
    pub(crate) now_s: u64,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

fn b64(part: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .ok()
}

/// Checks `token`'s signature with `keys`, then its issuer, audience, expiry and nonce,
/// and returns its claims.
///
/// # Errors
///
/// A [`Failure`] saying which check failed (never quoting the token).
pub(crate) fn validate(
    token: &str,
    keys: &Jwks,
    expected: &Expected<'_>,
) -> Result<Map<String, Value>, Failure> {
    let malformed = || Failure::new("The ID token is not a signed JSON Web Token.");
    let mut parts = token.split('.');
    let (Some(head), Some(body), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed());
    };
    let header: Header = b64(head)
        .and_then(|h| serde_json::from_slice(&h).ok())
        .ok_or_else(malformed)?;
    let signature = b64(signature).ok_or_else(malformed)?;
    let signed = &token.as_bytes()[..head.len() + 1 + body.len()];
    let (kty, verify): (&str, Verifier) = match header.alg.as_str() {
        "RS256" => ("RSA", verify_rs256),
        "ES256" => ("EC", verify_es256),
        _ => {
            return Err(Failure::new(
                "The ID token is signed with an algorithm the console does not accept (it accepts RS256 and ES256).",
            ));
        }
    };
    let candidates: Vec<&Jwk> = keys
        .keys
        .iter()
        .filter(|k| k.kty == kty)
        .filter(|k| k.use_.as_deref().is_none_or(|u| u == "sig"))
        .filter(|k| k.alg.as_deref().is_none_or(|a| a == header.alg))
        .filter(|k| header.kid.is_none() || k.kid == header.kid)
        .collect();
    if candidates.is_empty() {
        return Err(Failure::new(
            "The provider publishes no key the ID token could be checked with.",
        ));
    }
    if !candidates.iter().any(|k| verify(k, signed, &signature)) {
        return Err(Failure::new(
            "The ID token's signature does not verify with the provider's keys.",
        ));
    }
    let claims: Map<String, Value> = b64(body)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(malformed)?;
    if claims.get("iss").and_then(Value::as_str) != Some(expected.issuer) {
        return Err(Failure::new(
            "The ID token was issued by another issuer than the configured one.",
        ));
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(aud)) => aud == expected.client_id,
        Some(Value::Array(auds)) => {
            auds.iter().any(|a| a.as_str() == Some(expected.client_id))
                && (auds.len() == 1
                    || claims.get("azp").and_then(Value::as_str) == Some(expected.client_id))
        }
        _ => false,
    };
    if !audience_ok {
        return Err(Failure::new(
            "The ID token is meant for another client than this console.",
        ));
    }
    let exp = claims.get("exp").and_then(Value::as_u64);
    if exp.is_none_or(|exp| exp.saturating_add(LEEWAY_S) <= expected.now_s) {
        return Err(Failure::new("The ID token has expired."));
    }
    if claims
        .get("iat")
        .and_then(Value::as_u64)
        .is_some_and(|iat| iat > expected.now_s.saturating_add(LEEWAY_S))
    {
        return Err(Failure::new("The ID token was issued in the future."));
    }
    let nonce_ok = claims
        .get("nonce")
        .and_then(Value::as_str)
        .is_some_and(|n| crate::auth::same(n, expected.nonce));
    if !nonce_ok {
        return Err(Failure::new(
            "The ID token's nonce is not this sign-in's: it was made for another sign-in.",
        ));
    }
    let subject_ok = claims
        .get("sub")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty() && s.len() <= 255);
    if !subject_ok {
        return Err(Failure::new("The ID token names no subject."));
    }
    Ok(claims)
}

/// Checks a signature over the signed part of a token with one key.
type Verifier = fn(&Jwk, &[u8], &[u8]) -> bool;

fn verify_rs256(key: &Jwk, signed: &[u8], signature: &[u8]) -> bool {
    let (Some(n), Some(e)) = (
        key.n.as_deref().and_then(b64),
        key.e.as_deref().and_then(b64),
    ) else {
        return false;
    };
    ring::signature::RsaPublicKeyComponents { n, e }
        .verify(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            signed,
            signature,
        )
        .is_ok()
}

fn verify_es256(key: &Jwk, signed: &[u8], signature: &[u8]) -> bool {
    let (Some("P-256"), Some(x), Some(y)) = (
        key.crv.as_deref(),
        key.x.as_deref().and_then(b64),
        key.y.as_deref().and_then(b64),
    ) else {
        return false;
    };
    if x.len() != 32 || y.len() != 32 {
        return false;
    }
    let mut point = Vec::with_capacity(65);
    point.push(4);
    point.extend_from_slice(&x);
    point.extend_from_slice(&y);
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point)
        .verify(signed, signature)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A throwaway 2048-bit RSA key (PKCS#8), made for these tests only.
    const TEST_KEY: &[u8] = include_bytes!("test-key.pk8");

    fn enc(bytes: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    fn key_pair() -> ring::signature::RsaKeyPair {
        ring::signature::RsaKeyPair::from_pkcs8(TEST_KEY).expect("test key")
    }

    fn jwks(kid: &str) -> Jwks {
        let pair = key_pair();
        let public: ring::signature::RsaPublicKeyComponents<Vec<u8>> = pair.public().into();
        serde_json::from_value(json!({"keys": [{
            "kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
            "n": enc(&public.n), "e": enc(&public.e),
        }]}))
        .expect("jwks")
    }

    fn sign(header: &Value, claims: &Value) -> String {
        let signed = format!(
            "{}.{}",
            enc(header.to_string().as_bytes()),
            enc(claims.to_string().as_bytes())
        );
        let pair = key_pair();
        let mut signature = vec![0; pair.public().modulus_len()];
        pair.sign(
            &ring::signature::RSA_PKCS1_SHA256,
            &ring::rand::SystemRandom::new(),
            signed.as_bytes(),
            &mut signature,
        )
        .expect("sign");
        format!("{signed}.{}", enc(&signature))
    }

    const NOW: u64 = 1_800_000_000;

    fn good_claims() -> Value {
        json!({
            "iss": "https://id.example.com", "aud": "console", "sub": "u-1",
            "exp": NOW + 300, "iat": NOW, "nonce": "n-1",
            "name": "Alice Approver", "groups": ["approvers"],
        })
    }

    fn expected() -> Expected<'static> {
        Expected {
            issuer: "https://id.example.com",
            client_id: "console",
            nonce: "n-1",
            now_s: NOW,
        }
    }

    fn check(claims: &Value) -> Result<Map<String, Value>, Failure> {
        let token = sign(&json!({"alg": "RS256", "kid": "k1"}), claims);
        validate(&token, &jwks("k1"), &expected())
    }

    fn with(change: &str, value: Value) -> Value {
        let mut claims = good_claims();
        claims[change] = value;
        claims
    }

    #[test]
    fn a_good_token_is_accepted_and_read() {
        let claims = check(&good_claims()).expect("valid");
        assert_eq!(claims["sub"], "u-1");
        // An audience list naming the console, with it as the authorized party, is too.
        let mut listed = with("aud", json!(["console", "other"]));
        listed["azp"] = json!("console");
        check(&listed).expect("valid with azp");
    }

    #[test]
    fn each_claim_check_refuses_on_its_own() {
        let refusal = |claims: Value| check(&claims).expect_err("refused").0;
        assert!(refusal(with("iss", json!("https://evil.example.com"))).contains("issuer"));
        assert!(refusal(with("aud", json!("another-client"))).contains("another client"));
        assert!(refusal(with("aud", json!(["console", "other"]))).contains("another client"));
        assert!(refusal(with("exp", json!(NOW - LEEWAY_S - 1))).contains("expired"));
        assert!(refusal(with("iat", json!(NOW + LEEWAY_S + 10))).contains("future"));
        assert!(refusal(with("nonce", json!("n-2"))).contains("nonce"));
        let mut no_nonce = good_claims();
        no_nonce.as_object_mut().expect("object").remove("nonce");
        assert!(refusal(no_nonce).contains("nonce"));
        assert!(refusal(with("sub", json!(""))).contains("subject"));
        // Within the leeway, an expired-looking token still passes.
        check(&with("exp", json!(NOW - 5))).expect("within the leeway");
    }

    #[test]
    fn a_bad_signature_another_key_or_algorithm_is_refused() {
        let token = sign(&json!({"alg": "RS256", "kid": "k1"}), &good_claims());
        // The payload changed after signing: the signature no longer verifies.
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        parts[1] = enc(with("sub", json!("mallory")).to_string().as_bytes());
        let forged = parts.join(".");
        let err = validate(&forged, &jwks("k1"), &expected()).expect_err("forged");
        assert!(err.0.contains("signature"), "{err}");
        // A key id the provider does not publish.
        let err = validate(&token, &jwks("k2"), &expected()).expect_err("unknown kid");
        assert!(err.0.contains("no key"), "{err}");
        // `alg: none` and HMAC are never accepted.
        for alg in ["none", "HS256"] {
            let head = enc(json!({"alg": alg}).to_string().as_bytes());
            let body = enc(good_claims().to_string().as_bytes());
            let err = validate(&format!("{head}.{body}."), &jwks("k1"), &expected())
                .expect_err("alg refused");
            assert!(err.0.contains("algorithm"), "{err}");
        }
        for garbage in ["", "a.b", "a.b.c.d", "!!.??.**"] {
            assert!(validate(garbage, &jwks("k1"), &expected()).is_err());
        }
    }

    #[test]
    fn no_failure_quotes_the_token() {
        let token = sign(
            &json!({"alg": "RS256", "kid": "k1"}),
            &with("nonce", json!("n-2")),
        );
        let err = validate(&token, &jwks("k1"), &expected()).expect_err("refused");
        for part in token.split('.') {
            assert!(!err.0.contains(part));
        }
        assert!(!format!("{err:?}").contains("n-2"));
    }
}
