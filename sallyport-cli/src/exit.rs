//! Exit codes a shell script can rely on.

use std::process::ExitCode;

use sallyport_core::approval::ApprovalError;
use sallyport_core::journal::JournalError;
use sallyport_core::vault::VaultError;

/// The exit codes of `sallyport`. They are stable: scripts may test them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum Exit {
    /// 1 — a failure not covered below (I/O, keychain backend).
    Failure = 1,
    /// 2 — bad arguments.
    Usage = 2,
    /// 3 — the vault is locked (lock marker present).
    Locked = 3,
    /// 4 — wrong passphrase.
    WrongPassphrase = 4,
    /// 5 — no such credential or approval, or no vault / journal at the path.
    NotFound = 5,
    /// 6 — the credential or the vault file already exists.
    AlreadyExists = 6,
    /// 7 — the vault or journal file (or a proof file) is damaged, truncated, foreign or from
    /// a newer sallyport (it was left untouched).
    Corrupt = 7,
    /// 8 — `audit verify` found a broken chain; `audit checkpoint` or `prove` found the chain
    /// broken or no longer matching its checkpoint.
    ChainBroken = 8,
    /// 9 — `approvals approve` / `deny`: the approval was already decided (or is being
    /// carried out, or finished); nothing changed.
    AlreadyDecided = 9,
    /// 10 — `approvals approve` / `deny`: the approval expired before anyone decided;
    /// nothing is sent.
    Expired = 10,
    /// 11 — `reconcile`: an abandoned attempt is still unknown (its check could not tell);
    /// it stays unresolved and nothing was resent.
    Unsettled = 11,
    /// 12 — `scaffold`: none of the operations could be generated (each was listed with the
    /// reason).
    NothingGenerated = 12,
    /// 13 — `approvals verify`: a decision's signature does not verify (or is missing, or
    /// by another key than `--public-key`).
    SignatureInvalid = 13,
    /// 14 — `approvals approve` / `deny`: the decision was refused (the approver requested
    /// the call, has no authority under the decision policy, or signed wrongly); the refusal
    /// is audited and nothing changed.
    Refused = 14,
    /// 15 — `vault grants disconnect`: the provider did not revoke the grant (down, slow or
    /// refusing); the grant was NOT removed, so the command can be run again (or with
    /// `--force`).
    NotRevoked = 15,
    /// 16 — `credentials connect`: the provider or the user refused the authorization
    /// (`access_denied`, …), or the provider refused the code; nothing was stored.
    ConnectRefused = 16,
    /// 17 — `credentials connect`: the redirect's `state` did not match the connect (not its
    /// redirect, or forged); nothing was exchanged or stored.
    StateMismatch = 17,
    /// 18 — `credentials connect`: no redirect came back within `--timeout`; nothing was
    /// stored.
    ConnectTimedOut = 18,
    /// 19 — `audit check-proof` / `check-export`: the inclusion proof or sealed range does
    /// not verify (an edited, reordered or deleted record, a changed path, tree size, header
    /// or frontier, a truncated file, a forged checkpoint, or another key).
    ProofInvalid = 19,
    /// 20 — `audit prove`: no signed checkpoint covers the record yet (`audit checkpoint`
    /// makes one).
    NoCheckpoint = 20,
    /// 21 — `audit seal`: the shard has no record after its last seal; nothing was written
    /// or pruned.
    NothingToSeal = 21,
    /// 22 — `audit seal`: the journal refused to prune the sealed range (or cannot prune);
    /// the export was written and verifies, and nothing was deleted.
    PruneRefused = 22,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}

/// A failed command: what to print and how to exit.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) exit: Exit,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
        }
    }
}

/// The error and its sources, on one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

impl From<VaultError> for Failure {
    fn from(e: VaultError) -> Self {
        let exit = match &e {
            VaultError::Locked => Exit::Locked,
            VaultError::WrongPassphrase { .. } => Exit::WrongPassphrase,
            VaultError::NotFound(_) | VaultError::NotInitialized { .. } => Exit::NotFound,
            VaultError::AlreadyExists(_) => Exit::AlreadyExists,
            VaultError::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists => {
                Exit::AlreadyExists
            }
            VaultError::Corrupt { .. }
            | VaultError::NotAVault { .. }
            | VaultError::NewerFormat { .. } => Exit::Corrupt,
            VaultError::Invalid(_) => Exit::Usage,
            _ => Exit::Failure,
        };
        Self::new(exit, chain(&e))
    }
}

impl From<JournalError> for Failure {
    fn from(e: JournalError) -> Self {
        let exit = match &e {
            JournalError::Corrupt { .. } | JournalError::NewerFormat { .. } => Exit::Corrupt,
            _ => Exit::Failure,
        };
        Self::new(exit, chain(&e))
    }
}

impl From<ApprovalError> for Failure {
    fn from(e: ApprovalError) -> Self {
        match e {
            ApprovalError::NotFound(id) => Self::new(
                Exit::NotFound,
                format!(
                    "no approval `{}` in this journal",
                    sallyport_core::consent::escape(id.as_str())
                ),
            ),
            ApprovalError::Journal(e) => e.into(),
            other => Self::new(Exit::Failure, chain(&other)),
        }
    }
}
