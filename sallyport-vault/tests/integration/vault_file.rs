//! The encrypted file vault against real files: round trips, wrong passphrase, damaged,
//! truncated, foreign and newer files (left byte-identical), records moved or removed,
//! plaintext on disk, permissions, concurrent writers, locking, and the executor's
//! `vault_locked` refusal.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sallyport_core::channel::ChannelOutcome;
use sallyport_core::code::RefusalCode;
use sallyport_core::journal::{Journal, Phase, SqliteJournal};
use sallyport_core::vault::{
    ApiKeyPlacement, Binding, CredentialKind, CredentialMeta, FORMAT_VERSION, FileVault, KdfParams,
    Secret, Vault, VaultAdmin, VaultError, VaultState, lock_marker_path,
};
use sallyport_core::{Catalog, Executor, Session, Status};
use sallyport_tests::vault_rig::{
    CountingConsent, DeployPreview, PASSPHRASE, ReadStatus, ScriptedChannel, bearer, fast_kdf,
};
use sha2::{Digest, Sha256};

const TOKEN: &str = "tok_live_8d7f6e5d4c3b2a19";

fn vault_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("vault.spv")
}

fn vault_with_one(dir: &tempfile::TempDir) -> (PathBuf, Vec<u8>) {
    let path = vault_path(dir);
    let vault = FileVault::create(&path, PASSPHRASE, fast_kdf()).unwrap();
    vault
        .add(
            bearer("deploy-api", "https://api.example.com"),
            Secret::new(TOKEN),
        )
        .unwrap();
    vault
        .add(
            bearer("second-api", "https://second.example.com"),
            Secret::new("second-secret-value-0001"),
        )
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

fn unlock_error(path: &Path) -> VaultError {
    let vault = FileVault::open(path);
    let err = vault.unlock(PASSPHRASE).unwrap_err();
    assert_eq!(vault.state(), VaultState::Locked);
    err
}

/// Rewrites the JSON body of a vault file and fixes its checksum, as an attacker who knows
/// the format (but not the key) can.
fn rewrite_body(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let bytes = std::fs::read(path).unwrap();
    let body_bytes = &bytes[20..bytes.len() - 32];
    let mut body: serde_json::Value = serde_json::from_slice(body_bytes).unwrap();
    edit(&mut body);
    let mut out = bytes[..20].to_vec();
    out.extend_from_slice(serde_json::to_string(&body).unwrap().as_bytes());
    let digest = Sha256::digest(&out);
    out.extend_from_slice(&digest);
    std::fs::write(path, out).unwrap();
}

#[tokio::test]
async fn every_credential_kind_round_trips_through_a_fresh_instance() {
    let dir = tempfile::tempdir().unwrap();
    let path = vault_path(&dir);
    let vault = FileVault::create(&path, PASSPHRASE, fast_kdf()).unwrap();
    let metas = [
        bearer("bearer-1", "https://api.example.com/v1"),
        CredentialMeta::new(
            "basic-1",
            CredentialKind::Basic {
                user: "deployer".into(),
            },
            Binding::url("https://basic.example.com"),
        ),
        CredentialMeta::new(
            "apikey-1",
            CredentialKind::ApiKey {
                placement: ApiKeyPlacement::Header("X-Api-Key".into()),
            },
            Binding::url("https://key.example.com"),
        ),
        CredentialMeta::new(
            "sshkey-1",
            CredentialKind::SshKey,
            Binding::ssh("web-1", "deploy"),
        ),
        CredentialMeta::new(
            "sshpass-1",
            CredentialKind::SshPassword,
            Binding::ssh("db-1", "ops"),
        ),
    ];
    let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
    for meta in &metas {
        let secret = if meta.name == "sshkey-1" {
            Secret::new(key).with_passphrase("key-pass-\"quoted\"-ü")
        } else {
            Secret::new(format!("value-of-{}-\u{e9}\\\"", meta.name))
        };
        assert_eq!(vault.add(meta.clone(), secret).unwrap().version, 1);
    }
    drop(vault);

    let reopened = FileVault::open(&path);
    assert_eq!(reopened.state(), VaultState::Locked);
    assert!(matches!(
        reopened.resolve("bearer-1").await,
        Err(VaultError::Locked)
    ));
    reopened.unlock(PASSPHRASE).unwrap();
    assert_eq!(reopened.state(), VaultState::Unlocked);
    let listed = reopened.list().unwrap();
    assert_eq!(
        listed.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["apikey-1", "basic-1", "bearer-1", "sshkey-1", "sshpass-1"]
    );
    for meta in &metas {
        let credential = reopened.resolve(&meta.name).await.unwrap();
        assert_eq!(credential.meta(), meta);
        if meta.name == "sshkey-1" {
            assert_eq!(credential.secret().expose(), key);
            assert_eq!(
                credential.secret().expose_passphrase(),
                Some("key-pass-\"quoted\"-ü")
            );
        } else {
            assert_eq!(
                credential.secret().expose(),
                format!("value-of-{}-\u{e9}\\\"", meta.name)
            );
            assert_eq!(credential.secret().expose_passphrase(), None);
        }
    }
}

#[test]
fn the_default_kdf_parameters_are_stored_in_the_header_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = vault_path(&dir);
    FileVault::create(&path, PASSPHRASE, KdfParams::default()).unwrap();
    let status = FileVault::open(&path).status().unwrap();
    assert_eq!(status.kdf, KdfParams::new(65536, 3, 1));
    assert_eq!(status.format_version, FORMAT_VERSION);
    assert_eq!(status.records, 0);
    assert!(!status.lock_marker);
    FileVault::open(&path).unlock(PASSPHRASE).unwrap();
}

/// Each crafted header (with a valid checksum, as an attacker who knows the format writes it),
/// the field it sets, and the cap the refusal must name.
const COSTLY_HEADERS: &[(&str, u64, &str)] = &[
    (
        "memory_kib",
        4 * 1024 * 1024,
        "argon2 memory_kib 4194304 exceeds the cap of 2097152 KiB (2 GiB)",
    ),
    (
        "memory_kib",
        u32::MAX as u64,
        "argon2 memory_kib 4294967295 exceeds the cap of 2097152 KiB (2 GiB)",
    ),
    (
        "iterations",
        1_000_000,
        "argon2 iterations 1000000 is outside the accepted 1 to 16 passes",
    ),
    (
        "iterations",
        0,
        "argon2 iterations 0 is outside the accepted 1 to 16 passes",
    ),
    (
        "parallelism",
        255,
        "argon2 parallelism 255 is outside the accepted 1 to 16 lanes",
    ),
];

#[test]
fn a_header_demanding_an_uncapped_argon2_cost_is_refused_at_once_and_left_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = vault_with_one(&dir);
    let original = std::fs::read(&path).unwrap();
    for &(field, value, reason) in COSTLY_HEADERS {
        std::fs::write(&path, &original).unwrap();
        rewrite_body(&path, |body| body["kdf"][field] = value.into());
        let crafted = std::fs::read(&path).unwrap();
        let started = std::time::Instant::now();
        let vault = FileVault::open(&path);
        let err = vault.unlock(PASSPHRASE).unwrap_err();
        let status_err = vault.status().unwrap_err();
        let elapsed = started.elapsed();
        assert!(
            elapsed < Duration::from_secs(1),
            "{field} = {value}: refusing took {elapsed:?}"
        );
        let detail =
            format!("the key derivation header asks for more than this build accepts: {reason}");
        assert!(
            matches!(&err, VaultError::Corrupt { detail: d, .. } if *d == detail),
            "{field} = {value}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "vault {} is damaged or truncated ({detail}); the file was left untouched",
                path.display()
            )
        );
        assert_eq!(status_err.to_string(), err.to_string());
        assert_eq!(vault.state(), VaultState::Locked);
        assert_eq!(std::fs::read(&path).unwrap(), crafted, "{field} = {value}");
    }
}

#[test]
fn a_header_within_each_cap_but_over_the_combined_work_cap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = vault_with_one(&dir);
    // 2 GiB and 3 passes are each accepted; together they are 6 GiB-passes.
    rewrite_body(&path, |body| {
        body["kdf"]["memory_kib"] = (2 * 1024 * 1024).into();
        body["kdf"]["iterations"] = 3.into();
    });
    let crafted = std::fs::read(&path).unwrap();
    let started = std::time::Instant::now();
    let err = unlock_error(&path);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(
        matches!(&err, VaultError::Corrupt { detail, .. } if detail ==
            "the key derivation header asks for more than this build accepts: argon2 memory_kib \
             2097152 times iterations 3 is 6291456 KiB-passes, over the cap of 4194304 KiB-passes \
             (4 GiB-passes)"),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), crafted);
}

#[test]
fn create_refuses_parameters_over_the_caps_and_writes_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = vault_path(&dir);
    for (params, reason) in [
        (
            KdfParams::new(4 * 1024 * 1024, 1, 1),
            "argon2 memory_kib 4194304 exceeds the cap of 2097152 KiB (2 GiB)",
        ),
        (
            KdfParams::new(8 * 1024, 17, 1),
            "argon2 iterations 17 is outside the accepted 1 to 16 passes",
        ),
        (
            KdfParams::new(64, 1, 17),
            "argon2 parallelism 17 is outside the accepted 1 to 16 lanes",
        ),
        (
            KdfParams::new(8, 1, 2),
            "argon2 memory_kib 8 is below the floor of 16 KiB (8 KiB per lane)",
        ),
    ] {
        let err = FileVault::create(&path, PASSPHRASE, params).unwrap_err();
        assert!(
            matches!(&err, VaultError::Invalid(r) if r == reason),
            "{params:?}: {err:?}"
        );
        assert!(!path.exists());
    }
    // The largest accepted work opens in principle; the caps are the documented constants.
    assert_eq!(KdfParams::MAX_MEMORY_KIB, 2 * 1024 * 1024);
    assert_eq!(KdfParams::MAX_ITERATIONS, 16);
    assert_eq!(KdfParams::MAX_PARALLELISM, 16);
    assert!(KdfParams::new(2 * 1024 * 1024, 2, 4).check().is_ok());
}

#[test]
fn a_wrong_passphrase_is_refused_and_the_file_is_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (path, before) = vault_with_one(&dir);
    let vault = FileVault::open(&path);
    let err = vault.unlock("not the passphrase").unwrap_err();
    assert!(
        matches!(&err, VaultError::WrongPassphrase { path: p } if p == &path.display().to_string()),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "wrong passphrase for vault {}; the file was left untouched",
            path.display()
        )
    );
    assert_eq!(vault.state(), VaultState::Locked);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn a_flipped_byte_anywhere_is_damage_and_the_file_is_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (path, original) = vault_with_one(&dir);
    for at in [
        20,
        original.len() / 3,
        original.len() / 2,
        original.len() - 5,
    ] {
        let mut damaged = original.clone();
        damaged[at] ^= 0x01;
        std::fs::write(&path, &damaged).unwrap();
        let err = unlock_error(&path);
        assert!(
            matches!(&err, VaultError::Corrupt { detail, .. } if detail == "checksum mismatch: truncated or modified"),
            "byte {at}: {err:?}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), damaged, "byte {at}");
    }
}

#[test]
fn a_writer_opened_before_the_damage_refuses_to_write_and_leaves_the_file_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (path, original) = vault_with_one(&dir);
    let writer = FileVault::open(&path);
    writer.unlock(PASSPHRASE).unwrap();
    let mut damaged = original;
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x40;
    std::fs::write(&path, &damaged).unwrap();
    let err = writer
        .add(
            bearer("third", "https://third.example.com"),
            Secret::new("x-third-value"),
        )
        .unwrap_err();
    assert!(matches!(err, VaultError::Corrupt { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), damaged);
}

#[test]
fn a_truncated_file_is_reported_and_left_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (path, original) = vault_with_one(&dir);
    for len in [
        0usize,
        1,
        10,
        16,
        19,
        20,
        40,
        original.len() / 2,
        original.len() - 1,
    ] {
        let truncated = original[..len].to_vec();
        std::fs::write(&path, &truncated).unwrap();
        let err = unlock_error(&path);
        let expected_foreign = len == 0;
        match &err {
            VaultError::NotAVault { .. } if expected_foreign => {}
            VaultError::Corrupt { .. } if !expected_foreign => {}
            other => panic!("length {len}: unexpected {other:?}"),
        }
        assert_eq!(std::fs::read(&path).unwrap(), truncated, "length {len}");
    }
}

#[test]
fn a_foreign_file_is_not_a_vault_and_is_left_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = vault_path(&dir);
    let foreign: [&[u8]; 3] = [
        b"SQLite format 3\0\x10\x00\x01\x01 and more bytes of a database page",
        b"{\"vault_id\":\"looks like json\"}",
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
    ];
    for content in foreign {
        std::fs::write(&path, content).unwrap();
        let err = unlock_error(&path);
        assert_eq!(
            err.to_string(),
            format!(
                "{} is not a sallyport vault file; it was left untouched",
                path.display()
            )
        );
        assert!(matches!(
            FileVault::open(&path).status(),
            Err(VaultError::NotAVault { .. })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), content);
    }
}

#[test]
fn a_file_from_a_newer_format_is_refused_and_left_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (path, original) = vault_with_one(&dir);
    let mut newer = original;
    newer[16..20].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(&path, &newer).unwrap();
    let err = unlock_error(&path);
    assert!(
        matches!(
            err,
            VaultError::NewerFormat {
                found: 2,
                supported: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), newer);
}

#[test]
fn a_ciphertext_moved_to_another_record_fails_to_authenticate() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = vault_with_one(&dir);
    rewrite_body(&path, |body| {
        let records = body["records"].as_array_mut().unwrap();
        let (a, b) = (records[0].clone(), records[1].clone());
        records[0]["nonce"] = b["nonce"].clone();
        records[0]["ciphertext"] = b["ciphertext"].clone();
        records[1]["nonce"] = a["nonce"].clone();
        records[1]["ciphertext"] = a["ciphertext"].clone();
    });
    let moved = std::fs::read(&path).unwrap();
    let err = unlock_error(&path);
    assert!(
        matches!(&err, VaultError::Corrupt { detail, .. } if detail == "record 1 does not authenticate"),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), moved);
}

#[test]
fn a_record_with_a_bumped_version_fails_to_authenticate() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = vault_with_one(&dir);
    rewrite_body(&path, |body| {
        body["records"][0]["version"] = serde_json::json!(2);
    });
    let err = unlock_error(&path);
    assert!(
        matches!(&err, VaultError::Corrupt { detail, .. } if detail.starts_with("the records do not match")),
        "{err:?}"
    );
}

#[test]
fn a_record_deleted_from_the_file_is_detected_by_the_sealed_record_list() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = vault_with_one(&dir);
    rewrite_body(&path, |body| {
        body["records"].as_array_mut().unwrap().remove(1);
    });
    let edited = std::fs::read(&path).unwrap();
    let err = unlock_error(&path);
    assert!(
        matches!(&err, VaultError::Corrupt { detail, .. } if detail == "the records do not match the sealed record list (removed, added or rolled back)"),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), edited);
}

#[test]
fn the_vault_file_holds_no_secret_name_or_binding_in_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let path = vault_path(&dir);
    let vault = FileVault::create(&path, PASSPHRASE, fast_kdf()).unwrap();
    vault
        .add(
            CredentialMeta::new(
                "payments-prod",
                CredentialKind::Basic {
                    user: "billing-robot".into(),
                },
                Binding::url("https://payments.internal.example"),
            ),
            Secret::new("pw-Canary-7a1c9e3f"),
        )
        .unwrap();
    vault
        .add(
            CredentialMeta::new(
                "bastion-key",
                CredentialKind::SshKey,
                Binding::ssh("bastion-eu-west", "opsuser"),
            ),
            Secret::new("-----BEGIN OPENSSH PRIVATE KEY-----\nKEYMATERIAL-abcdef\n-----END OPENSSH PRIVATE KEY-----\n")
                .with_passphrase("keypass-5b2d"),
        )
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let needles = [
        "pw-Canary-7a1c9e3f",
        "KEYMATERIAL-abcdef",
        "keypass-5b2d",
        "payments-prod",
        "billing-robot",
        "payments.internal.example",
        "bastion-key",
        "bastion-eu-west",
        "opsuser",
        PASSPHRASE,
    ];
    for needle in needles {
        for form in [
            needle.to_owned(),
            STANDARD.encode(needle).trim_end_matches('=').to_owned(),
            hex::encode(needle),
        ] {
            assert!(
                !bytes.windows(form.len()).any(|w| w == form.as_bytes()),
                "{needle} found in the vault file as {form}"
            );
        }
    }
}

#[cfg(unix)]
#[test]
fn the_vault_file_and_its_directory_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/vault.spv");
    let vault = FileVault::create(&path, PASSPHRASE, fast_kdf()).unwrap();
    vault
        .add(
            bearer("a", "https://a.example.com"),
            Secret::new("aaaa-1111"),
        )
        .unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
}

#[test]
fn concurrent_writers_in_separate_instances_lose_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = vault_path(&dir);
    FileVault::create(&path, PASSPHRASE, fast_kdf()).unwrap();
    let writers: Vec<_> = (0..6)
        .map(|w| {
            let path = path.clone();
            std::thread::spawn(move || {
                let vault = FileVault::open(&path);
                vault.unlock(PASSPHRASE).unwrap();
                for i in 0..5 {
                    vault
                        .add(
                            bearer(&format!("w{w}-r{i}"), "https://api.example.com"),
                            Secret::new(format!("secret-{w}-{i}-value")),
                        )
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let vault = FileVault::open(&path);
    vault.unlock(PASSPHRASE).unwrap();
    let names: Vec<String> = vault.list().unwrap().into_iter().map(|m| m.name).collect();
    assert_eq!(names.len(), 30);
    for w in 0..6 {
        for i in 0..5 {
            assert!(names.contains(&format!("w{w}-r{i}")), "w{w}-r{i} lost");
        }
    }
    assert!(
        std::fs::read_dir(dir.path()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".tmp-")),
        "a temporary file was left behind"
    );
}

#[tokio::test]
async fn add_set_rotate_and_remove_keep_versions_and_refuse_the_wrong_case() {
    let dir = tempfile::tempdir().unwrap();
    let vault = FileVault::create(vault_path(&dir), PASSPHRASE, fast_kdf()).unwrap();
    let meta = bearer("deploy-api", "https://api.example.com");
    assert_eq!(
        vault
            .add(meta.clone(), Secret::new("v1-value"))
            .unwrap()
            .version,
        1
    );
    assert!(matches!(
        vault.add(meta.clone(), Secret::new("other")),
        Err(VaultError::AlreadyExists(name)) if name == "deploy-api"
    ));
    assert_eq!(
        vault
            .rotate("deploy-api", Secret::new("v2-value"))
            .unwrap()
            .version,
        2
    );
    let credential = vault.resolve("deploy-api").await.unwrap();
    assert_eq!(credential.secret().expose(), "v2-value");
    assert_eq!(credential.meta().binding, meta.binding);
    let replaced = vault
        .set(
            bearer("deploy-api", "https://new.example.com"),
            Secret::new("v3-value"),
        )
        .unwrap();
    assert_eq!(replaced.version, 3);
    assert_eq!(replaced.binding.urls, ["https://new.example.com"]);
    assert!(matches!(
        vault.rotate("missing", Secret::new("x")),
        Err(VaultError::NotFound(n)) if n == "missing"
    ));
    vault.remove("deploy-api").unwrap();
    assert!(matches!(
        vault.remove("deploy-api"),
        Err(VaultError::NotFound(_))
    ));
    assert!(matches!(
        vault.add(bearer("_index", "https://a.example.com"), Secret::new("x")),
        Err(VaultError::Invalid(_))
    ));
    assert!(matches!(
        vault.add(
            bearer("no-binding", "ftp://a.example.com"),
            Secret::new("x")
        ),
        Err(VaultError::Invalid(_))
    ));
    assert_eq!(vault.list().unwrap(), Vec::<CredentialMeta>::new());
}

#[tokio::test]
async fn lock_drops_the_secrets_and_refuses_resolve_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (path, before) = vault_with_one(&dir);
    let vault = FileVault::open(&path);
    vault.unlock(PASSPHRASE).unwrap();
    assert!(vault.scrubber().pattern_count() > 0);
    vault.lock();
    assert_eq!(vault.state(), VaultState::Locked);
    assert!(matches!(
        vault.resolve("deploy-api").await,
        Err(VaultError::Locked)
    ));
    assert!(matches!(
        vault.add(bearer("x", "https://x.example.com"), Secret::new("xxxx")),
        Err(VaultError::Locked)
    ));
    assert!(matches!(vault.list(), Err(VaultError::Locked)));
    assert_eq!(vault.scrubber().pattern_count(), 0);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[tokio::test]
async fn the_lock_marker_locks_a_running_instance_and_unlock_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = vault_with_one(&dir);
    let running = FileVault::open(&path);
    running.unlock(PASSPHRASE).unwrap();
    assert_eq!(running.state(), VaultState::Unlocked);

    FileVault::open(&path).lock_everywhere().unwrap();
    assert!(lock_marker_path(&path).exists());
    assert_eq!(running.state(), VaultState::Locked);
    assert!(matches!(
        running.resolve("deploy-api").await,
        Err(VaultError::Locked)
    ));
    assert!(FileVault::open(&path).status().unwrap().lock_marker);

    running.unlock(PASSPHRASE).unwrap();
    assert!(!lock_marker_path(&path).exists());
    assert_eq!(running.state(), VaultState::Unlocked);
}

#[tokio::test]
async fn an_idle_vault_locks_itself_after_the_auto_lock_time() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = vault_with_one(&dir);
    let vault = FileVault::open(&path).auto_lock_after(Duration::from_millis(200));
    vault.unlock(PASSPHRASE).unwrap();
    assert_eq!(
        vault.resolve("deploy-api").await.unwrap().secret().expose(),
        TOKEN
    );
    assert_eq!(vault.state(), VaultState::Unlocked);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(vault.state(), VaultState::Locked);
    assert!(matches!(
        vault.resolve("deploy-api").await,
        Err(VaultError::Locked)
    ));
}

#[test]
fn create_refuses_an_existing_file_and_leaves_it_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (path, before) = vault_with_one(&dir);
    let err = FileVault::create(&path, "another passphrase", fast_kdf()).unwrap_err();
    assert!(
        matches!(&err, VaultError::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn the_scrubber_knows_every_unlocked_secret_and_passphrase() {
    let dir = tempfile::tempdir().unwrap();
    let vault = FileVault::create(vault_path(&dir), PASSPHRASE, fast_kdf()).unwrap();
    vault
        .add(
            CredentialMeta::new("k", CredentialKind::SshKey, Binding::ssh("h", "u")),
            Secret::new("-----BEGIN KEY-----\nLINEONE-abcdefghijkl\n-----END KEY-----\n")
                .with_passphrase("pass-phrase-9"),
        )
        .unwrap();
    let scrubber = vault.scrubber();
    assert_eq!(scrubber.scrub("a pass-phrase-9 b"), "a [REDACTED] b");
    assert_eq!(
        scrubber.scrub("leaked line LINEONE-abcdefghijkl here"),
        "leaked line [REDACTED] here"
    );
}

#[tokio::test]
async fn a_locked_vault_refuses_every_call_before_consent_and_the_refusal_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = vault_with_one(&dir);
    let vault = Arc::new(FileVault::open(&path));
    let journal = Arc::new(SqliteJournal::open(dir.path().join("journal.db")).unwrap());
    let channel = ScriptedChannel::new(|_| ChannelOutcome::completed(serde_json::json!({})));
    let sends = Arc::clone(&channel.sends);
    let consent = CountingConsent::default();
    let catalog = Catalog::builder()
        .action::<DeployPreview>()
        .action::<ReadStatus>()
        .build()
        .unwrap();
    let executor = Executor::builder(catalog)
        .journal_arc(journal.clone())
        .channel(channel)
        .vault_arc(vault.clone())
        .consent(consent.clone())
        .build()
        .unwrap();
    let session = Session::new("s-locked");
    let with_credential = executor
        .call(
            "deploy_preview",
            serde_json::json!({"project": "p1", "reason": "ship the preview"}),
            &session,
        )
        .await;
    let without_credential = executor
        .call(
            "read_status",
            serde_json::json!({"project": "p1"}),
            &session,
        )
        .await;
    for result in [&with_credential, &without_credential] {
        assert_eq!(result.status, Status::Rejected);
        assert_eq!(result.code, Some(RefusalCode::VaultLocked.into()));
        assert_eq!(
            result.reason.as_deref(),
            Some("the credential vault is locked; a human must unlock it before any call")
        );
        assert!(result.receipt_id.is_some());
    }
    assert_eq!(consent.asked.load(Ordering::SeqCst), 0);
    assert_eq!(sends.load(Ordering::SeqCst), 0);
    let records = journal.records().await.unwrap();
    assert_eq!(records.len(), 2);
    for (record, action) in records.iter().zip(["deploy_preview", "read_status"]) {
        assert_eq!(record.event.action, action);
        assert_eq!(record.event.phase, Phase::Refused);
        assert_eq!(record.event.code, Some(RefusalCode::VaultLocked.into()));
        assert_eq!(record.event.dispatches, 0);
        assert_eq!(record.event.consent, None);
    }
    assert!(journal.verify().await.unwrap().is_intact());

    // Unlocked, the same call goes through consent and is sent once.
    vault.unlock(PASSPHRASE).unwrap();
    let result = executor
        .call(
            "deploy_preview",
            serde_json::json!({"project": "p1", "reason": "ship the preview"}),
            &session,
        )
        .await;
    assert_eq!(result.status, Status::Completed);
    assert_eq!(consent.asked.load(Ordering::SeqCst), 1);
    assert_eq!(sends.load(Ordering::SeqCst), 1);
}
