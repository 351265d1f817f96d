//! The in-memory vault's admin surface, and the redaction of secret types in `Debug`.

use sallyport_core::vault::{
    Binding, Credential, CredentialKind, CredentialMeta, MemoryVault, Secret, Vault, VaultAdmin,
    VaultError, VaultState,
};

fn bearer(name: &str) -> CredentialMeta {
    CredentialMeta::new(
        name,
        CredentialKind::Bearer,
        Binding::url("https://api.example.com"),
    )
}

#[tokio::test]
async fn the_memory_vault_admin_surface_adds_rotates_lists_and_removes() {
    let vault = MemoryVault::new();
    assert_eq!(
        VaultAdmin::add(&vault, bearer("a"), Secret::new("mem-a-1"))
            .unwrap()
            .version,
        1
    );
    assert!(matches!(
        VaultAdmin::add(&vault, bearer("a"), Secret::new("x")),
        Err(VaultError::AlreadyExists(n)) if n == "a"
    ));
    assert_eq!(
        vault.rotate("a", Secret::new("mem-a-2")).unwrap().version,
        2
    );
    assert_eq!(
        VaultAdmin::set(&vault, bearer("a"), Secret::new("mem-a-3"))
            .unwrap()
            .version,
        3
    );
    assert_eq!(
        vault.resolve("a").await.unwrap().secret().expose(),
        "mem-a-3"
    );
    assert_eq!(
        VaultAdmin::list(&vault)
            .unwrap()
            .iter()
            .map(|m| (m.name.as_str(), m.version))
            .collect::<Vec<_>>(),
        [("a", 3)]
    );
    VaultAdmin::remove(&vault, "a").unwrap();
    assert!(matches!(
        VaultAdmin::remove(&vault, "a"),
        Err(VaultError::NotFound(_))
    ));
    vault.lock();
    assert_eq!(vault.state(), VaultState::Locked);
    assert!(matches!(vault.resolve("a").await, Err(VaultError::Locked)));
}

#[test]
fn secrets_and_credentials_print_redacted_in_debug() {
    let secret = Secret::new("dbg-canary-value").with_passphrase("dbg-canary-pass");
    assert_eq!(format!("{secret:?}"), "Secret(..)");
    assert_eq!(format!("{secret:#?}"), "Secret(..)");
    let credential = Credential::new(bearer("deploy-api"), secret);
    let debug = format!("{credential:?}");
    assert_eq!(
        debug,
        "Credential { name: \"deploy-api\", kind: Bearer, version: 1, .. }"
    );
    let vault = MemoryVault::new();
    vault.set(bearer("deploy-api"), Secret::new("dbg-canary-value"));
    let debug = format!("{vault:?} {:?}", vault.scrubber());
    assert!(!debug.contains("dbg-canary"), "{debug}");
}

#[test]
fn metadata_checks_refuse_bad_names_and_bindings_with_exact_messages() {
    let vault = MemoryVault::new();
    let cases = [
        (
            bearer("has space"),
            "invalid credential: credential names are 1-128 characters of A-Z a-z 0-9 . _ - and do not start with . or _ (9 characters given)",
        ),
        (
            CredentialMeta::new(
                "h",
                CredentialKind::Bearer,
                Binding::url("ftp://a.example.com"),
            ),
            "invalid credential: a bound URL starts with https:// (or http:// for loopback)",
        ),
        (
            CredentialMeta::new(
                "u",
                CredentialKind::Bearer,
                Binding::url("https://user@a.example.com"),
            ),
            "invalid credential: a bound URL has a host and no user info, query, fragment or spaces",
        ),
        (
            CredentialMeta::new(
                "s",
                CredentialKind::SshKey,
                Binding::url("https://a.example.com"),
            ),
            "invalid credential: an SSH credential is bound to one or more SSH user@host pairs and no URL",
        ),
        (
            CredentialMeta::new("b", CredentialKind::Bearer, Binding::ssh("h", "u")),
            "invalid credential: an HTTP credential is bound to one or more base URLs and no SSH host",
        ),
    ];
    for (meta, message) in cases {
        let err = VaultAdmin::add(&vault, meta, Secret::new("value-never-shown")).unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    assert!(VaultAdmin::list(&vault).unwrap().is_empty());
}
