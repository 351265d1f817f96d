//! Stage 6, vault: the vault is unlocked, else `vault_locked`; the credential the action
//! binds resolves, was not rejected by the upstream at this version, and the channel binds
//! it to the prepared request, else `credential_unavailable`. From here on the call has its
//! own scrubber: the vault's, plus the resolved value.
//!
//! A credential held for each subject (an OAuth credential configured `per_subject`)
//! resolves to the grant of the session's subject: a session without a subject, or a
//! subject who has not connected the account (or whose grant the provider refused for
//! good), is refused here with `credential_unavailable` and a [`ConnectNeeded`] for the
//! host, before consent and before anything is sent.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use super::call::Call;
use super::definition::Approved;
use crate::code::RefusalCode;
use crate::outcome::{ConnectNeeded, Refusal};
use crate::scrub::Scrubber;
use crate::vault::{Credential, GrantKey, Vault, VaultError, VaultState};

/// Credentials an upstream rejected: name → the version it rejected.
pub(crate) type Unusable = Mutex<HashMap<String, u64>>;

/// A call whose credential is resolved and bound to its request. Only this stage's `unlock` makes one.
pub(crate) struct Unlocked {
    call: Call,
}

impl fmt::Debug for Unlocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unlocked")
            .field("call", &self.call)
            .finish()
    }
}

impl Unlocked {
    /// The call as stages 1–6 established it: its credential bound, its own scrubber.
    pub(crate) fn call(&self) -> &Call {
        &self.call
    }

    /// The call alone, for stage 7 to carry on.
    pub(super) fn into_call(self) -> Call {
        self.call
    }
}

fn locked() -> Refusal {
    Refusal::new(
        RefusalCode::VaultLocked,
        "the credential vault is locked; a human must unlock it before any call",
    )
}

/// Resolves and binds the credential.
///
/// Not an `async fn`: one keeps its by-value argument twice in its future; the block
/// captures the call it takes out, once.
pub(super) fn unlock(
    vault: Option<&Arc<dyn Vault>>,
    unusable: &Unusable,
    subject: Option<&str>,
    approved: Approved,
) -> impl Future<Output = Result<Unlocked, Refusal>> {
    let mut call = approved.into_call();
    let subject = subject.map(str::to_owned);
    async move {
        if let Some(vault) = vault
            && vault.state() == VaultState::Locked
        {
            return Err(locked());
        }
        if let Some(name) = call.spec().credential.clone() {
            let vault = vault.ok_or_else(|| {
                Refusal::new(RefusalCode::CredentialUnavailable, "no vault is configured")
            })?;
            let resolved = vault.resolve(&name).await.map_err(|e| match e {
                VaultError::Locked => locked(),
                VaultError::NotFound(_) => Refusal::new(
                    RefusalCode::CredentialUnavailable,
                    format!("credential `{name}` is not in the vault"),
                ),
                _ => Refusal::new(
                    RefusalCode::CredentialUnavailable,
                    format!("credential `{name}` could not be read from the vault"),
                ),
            })?;
            let resolved = if resolved.meta().kind.per_subject() {
                for_subject(resolved, subject.as_deref()).await?
            } else {
                resolved
            };
            if rejected_version(unusable, &name)? == Some(resolved.meta().version) {
                return Err(Refusal::new(
                    RefusalCode::CredentialUnavailable,
                    format!(
                        "credential `{name}` was rejected by the upstream earlier; a human must replace it"
                    ),
                ));
            }
            call.bind(resolved)?;
        }
        // The call's scrubber, from here on for every text of the call: the vault's now (it
        // knows the resolved value, unless the vault changed in between), plus that value.
        let scrubber = match vault {
            Some(vault) => {
                let scrubber = vault.scrubber();
                match call.credential() {
                    Some(c) if !covers(&scrubber, c) => {
                        let secret = c.secret();
                        Arc::new(scrubber.extended(
                            std::iter::once(secret.expose()).chain(secret.expose_passphrase()),
                        ))
                    }
                    _ => scrubber,
                }
            }
            None => Arc::new(Scrubber::empty()),
        };
        call.scrub_with(scrubber);
        Ok(Unlocked { call })
    }
}

/// `credential` (held for each subject) resolved for `subject`: refused when the session
/// names no subject, or the subject's grant is missing or needs reconnecting.
async fn for_subject(credential: Credential, subject: Option<&str>) -> Result<Credential, Refusal> {
    let name = credential.meta().name.clone();
    let refuse =
        |reason: String, reconnect: bool| {
            Refusal::new(RefusalCode::CredentialUnavailable, reason).with_connect(
                ConnectNeeded::new(name.as_str(), subject.map(str::to_owned), reconnect),
            )
        };
    let Some(subject) = subject else {
        return Err(refuse(
            format!(
                "credential `{name}` is held for each user, and this session does not say which user it acts for; nothing was sent; tell the user the call needs their own connected `{name}` account"
            ),
            false,
        ));
    };
    let Some(store) = credential.grants() else {
        return Err(Refusal::new(
            RefusalCode::CredentialUnavailable,
            format!(
                "credential `{name}` is an OAuth credential, and its vault keeps no OAuth grants; nothing was sent"
            ),
        ));
    };
    match store
        .current(&GrantKey::for_subject(name.as_str(), subject))
        .await
    {
        Ok(grant) => match grant.reconnect_reason() {
            Some(_) => Err(refuse(
                format!(
                    "the user's `{name}` account must be connected again (the provider no longer accepts its grant); nothing was sent; ask them to reconnect it"
                ),
                true,
            )),
            None => Ok(credential.with_subject(subject)),
        },
        Err(VaultError::Locked) => Err(locked()),
        Err(VaultError::NotFound(_)) => Err(refuse(
            format!(
                "the user has not connected their `{name}` account; nothing was sent; ask them to connect it"
            ),
            false,
        )),
        Err(_) => Err(Refusal::new(
            RefusalCode::CredentialUnavailable,
            format!("the user's `{name}` grant could not be read from the vault; nothing was sent"),
        )),
    }
}

/// The version of `name` an upstream rejected, if any. A poisoned map (a thread panicked
/// while holding it) fails closed: the credential is refused, never assumed usable.
fn rejected_version(unusable: &Unusable, name: &str) -> Result<Option<u64>, Refusal> {
    match unusable.lock() {
        Ok(map) => Ok(map.get(name).copied()),
        Err(_) => Err(Refusal::new(
            RefusalCode::CredentialUnavailable,
            format!(
                "whether credential `{name}` was rejected by the upstream cannot be read; refusing to use it"
            ),
        )),
    }
}

/// Whether `scrubber` knows every value of `credential`.
fn covers(scrubber: &Scrubber, credential: &Credential) -> bool {
    let secret = credential.secret();
    scrubber.covers(secret.expose())
        && secret
            .expose_passphrase()
            .is_none_or(|p| scrubber.covers(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_rejection_map_refuses_the_credential() {
        let unusable: Arc<Unusable> = Arc::default();
        let poison = Arc::clone(&unusable);
        let _ = std::thread::spawn(move || {
            let _held = poison.lock().expect("lock");
            panic!("poison the map");
        })
        .join();
        assert!(unusable.is_poisoned());
        let refusal = rejected_version(&unusable, "demo-api").expect_err("fails closed");
        assert_eq!(refusal.code, RefusalCode::CredentialUnavailable);
    }

    #[test]
    fn a_healthy_map_reports_the_rejected_version() {
        let unusable = Unusable::default();
        assert_eq!(rejected_version(&unusable, "a").expect("readable"), None);
        unusable.lock().expect("lock").insert("a".to_owned(), 3);
        assert_eq!(rejected_version(&unusable, "a").expect("readable"), Some(3));
    }
}
