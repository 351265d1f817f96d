//! Approvers' Ed25519 keys: `approvals keygen`, `approve --key`, `approvals verify`.
//!
//! A secret key file holds the 32-byte seed as 64 hex characters (a trailing newline is
//! allowed). The signature covers [`Decider::statement`]: the approval, the exact request's
//! fingerprint, the definition hash, the verdict and the approver, so it cannot be moved to
//! another approval, request or verdict. The journal keeps the public key beside it, and the
//! decision's audit record carries both.

use std::io::Write as _;
use std::path::Path;

use ed25519_dalek::{Signer, SigningKey};
use sallyport_core::approval::{
    Approval, ApprovalDecision, Decider, DecisionSignature, SignatureCheck, Verdict,
    check_signature,
};
use sallyport_core::consent::escape;
use zeroize::Zeroizing;

use crate::exit::{Exit, Failure};

/// Reads the secret key at `path`.
fn signing_key(path: &Path) -> Result<SigningKey, Failure> {
    let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
        Failure::new(
            Exit::NotFound,
            format!("cannot read the key file {}: {e}", path.display()),
        )
    })?);
    let seed = Zeroizing::new(hex::decode(text.trim()).ok().and_then(|b| <[u8; 32]>::try_from(b).ok()).ok_or_else(|| {
        Failure::new(
            Exit::Usage,
            format!(
                "the key file {} does not hold an Ed25519 secret key (64 hex characters, as \
                 `sallyport approvals keygen` writes)",
                path.display()
            ),
        )
    })?);
    Ok(SigningKey::from_bytes(&seed))
}

/// `decider`'s signature over its `verdict` on `approval`, with the key at `path`.
pub(crate) fn sign(
    path: &Path,
    decider: &Decider,
    approval: &Approval,
    verdict: Verdict,
) -> Result<DecisionSignature, Failure> {
    let key = signing_key(path)?;
    let signature = key.sign(&decider.statement(approval, verdict));
    Ok(DecisionSignature::new(
        hex::encode(key.verifying_key().to_bytes()),
        hex::encode(signature.to_bytes()),
    ))
}

/// A public key given as 64 hex characters or a file holding them; lower-case hex.
pub(crate) fn public_key(given: &str) -> Result<String, Failure> {
    let text = if given.len() == 64 && given.bytes().all(|b| b.is_ascii_hexdigit()) {
        given.to_owned()
    } else {
        std::fs::read_to_string(given).map_err(|e| {
            Failure::new(
                Exit::NotFound,
                format!("cannot read the public key {given}: {e}"),
            )
        })?
    };
    let bytes = hex::decode(text.trim())
        .ok()
        .filter(|b| b.len() == 32)
        .ok_or_else(|| Failure::new(Exit::Usage, "a public key is 64 hex characters"))?;
    Ok(hex::encode(bytes))
}

/// Every decision of `approval`: the counted approvals of a quorum, then the final decision
/// (once, when it is also the last counted approval).
fn decisions(approval: &Approval) -> Vec<&ApprovalDecision> {
    let mut all: Vec<&ApprovalDecision> = approval.approvals.iter().collect();
    if let Some(last) = &approval.decision
        && !all.contains(&last)
    {
        all.push(last);
    }
    all
}

/// `approvals verify`: one line per decision; fails when one does not verify (or, with
/// `expected`, is unsigned or signed by another key).
pub(crate) fn verify(approval: &Approval, expected: Option<&str>) -> Result<(), Failure> {
    let all = decisions(approval);
    if all.is_empty() {
        println!(
            "approval {}: no decision yet",
            escape(approval.approval_id.as_str())
        );
        return Ok(());
    }
    let mut bad = 0;
    for d in all {
        let who = format!(
            "{} {} by {} via {}",
            escape(approval.approval_id.as_str()),
            d.verdict,
            escape(&d.decider.by),
            escape(&d.decider.channel)
        );
        let key = d.decider.signature.as_ref().map(|s| s.public_key.as_str());
        let check = check_signature(approval, &d.decider, d.verdict);
        let line = match (check, key) {
            (SignatureCheck::Valid, Some(key)) if expected.is_none_or(|e| e == key) => {
                format!("valid     {who}: signed by key {key}")
            }
            (SignatureCheck::Valid, Some(key)) => {
                bad += 1;
                format!("WRONG KEY {who}: signed by key {key}, not the one given")
            }
            (SignatureCheck::Invalid, _) => {
                bad += 1;
                format!("INVALID   {who}: the signature does not verify")
            }
            _ if expected.is_some() => {
                bad += 1;
                format!("UNSIGNED  {who}")
            }
            _ => format!("unsigned  {who}"),
        };
        println!("{line}");
    }
    if bad > 0 {
        return Err(Failure::new(
            Exit::SignatureInvalid,
            format!("{bad} decision(s) did not verify"),
        ));
    }
    Ok(())
}

/// `approvals keygen FILE`: a fresh secret key written to `file` (created, mode 0600), the
/// public key printed.
pub(crate) fn keygen(file: &Path) -> Result<(), Failure> {
    let mut seed = Zeroizing::new([0u8; 32]);
    getrandom::fill(seed.as_mut())
        .map_err(|e| Failure::new(Exit::Failure, format!("no randomness: {e}")))?;
    let key = SigningKey::from_bytes(&seed);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut out = options.open(file).map_err(|e| {
        let exit = if e.kind() == std::io::ErrorKind::AlreadyExists {
            Exit::AlreadyExists
        } else {
            Exit::Failure
        };
        Failure::new(exit, format!("cannot create {}: {e}", file.display()))
    })?;
    let text = Zeroizing::new(format!("{}\n", hex::encode(seed.as_ref())));
    out.write_all(text.as_bytes())
        .and_then(|()| out.sync_all())
        .map_err(|e| {
            Failure::new(
                Exit::Failure,
                format!("cannot write {}: {e}", file.display()),
            )
        })?;
    println!("{}", hex::encode(key.verifying_key().to_bytes()));
    Ok(())
}
