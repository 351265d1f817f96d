//! A user pays only for what they use (issue 36): a program outside the workspace that
//! depends on `sallyport-core` without default features, plus `sallyport-http` and
//! `sallyport-postgres`, resolves and builds without SQLite, the file vault's cryptography,
//! the OpenAPI document code, the secret rules or any OS keychain store. The same program with
//! the defaults on does pull SQLite, the file vault and the secret rules in, so the check below
//! can tell the two apart.
//!
//! `cargo tree` and `cargo build` run offline against the workspace's own `Cargo.lock`, so
//! they use exactly the versions the workspace was built with and need no network.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates a program without the embedded defaults must not compile.
const HEAVY: &[&str] = &[
    "rusqlite",
    "libsqlite3-sys",
    "argon2",
    "chacha20poly1305",
    "serde_norway",
    "keyring-core",
    "linux-keyutils-keyring-store",
    "zbus-secret-service-keyring-store",
    "sallyport-sqlite",
    "sallyport-vault",
    "sallyport-openapi",
    // The secret rules (issue 40): 700 KB of rule data and their regex compilation.
    "sallyport-secrets",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Writes the program into a fresh directory: its manifest (its own workspace, path
/// dependencies on ours), its source and the workspace's lockfile.
fn lean_app(core_defaults: bool) -> tempfile::TempDir {
    let root = workspace();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |krate: &str| root.join(krate).display().to_string();
    let manifest = format!(
        r#"[package]
name = "lean-app"
version = "0.0.0"
edition = "2024"
publish = false

[workspace]

[dependencies]
sallyport-core = {{ path = "{core}", default-features = {core_defaults} }}
sallyport-http = {{ path = "{http}" }}
sallyport-postgres = {{ path = "{postgres}" }}
tokio = {{ version = "1.47", features = ["rt", "macros"] }}
"#,
        core = path("sallyport-core"),
        http = path("sallyport-http"),
        postgres = path("sallyport-postgres"),
    );
    std::fs::write(dir.path().join("Cargo.toml"), manifest).expect("manifest");
    std::fs::create_dir(dir.path().join("src")).expect("src");
    std::fs::copy(
        root.join("tests/fixtures/lean-app/src/main.rs"),
        dir.path().join("src/main.rs"),
    )
    .expect("main.rs");
    std::fs::copy(root.join("Cargo.lock"), dir.path().join("Cargo.lock")).expect("lockfile");
    dir
}

/// Every package the program compiles (normal and build dependencies), one name a line.
fn packages(dir: &Path) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--edges",
            "normal,build",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(dir)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8(out.stdout)
        .expect("utf8")
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn without_the_defaults_no_sqlite_no_file_vault_no_yaml_no_keychain() {
    let dir = lean_app(false);
    let names = packages(dir.path());
    let heavy: Vec<&&str> = HEAVY
        .iter()
        .filter(|h| names.iter().any(|n| n == **h))
        .collect();
    assert!(heavy.is_empty(), "the lean program compiles {heavy:?}");
    for needed in [
        "sallyport-kernel",
        "sallyport-core",
        "tokio-postgres",
        "reqwest",
    ] {
        assert!(
            names.iter().any(|n| n == needed),
            "{needed} missing from {names:?}"
        );
    }

    // And it builds, in the target directory the crates built outside the workspace share
    // (beside the workspace's; `readme_program` builds there too, so what the two resolve
    // alike is compiled once).
    let target = workspace().join("target/outside");
    let built = Command::new(env!("CARGO"))
        .args(["build", "--offline", "--quiet"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(dir.path())
        .output()
        .expect("cargo build runs");
    assert!(
        built.status.success(),
        "the lean program does not build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let ran = Command::new(target.join("debug/lean-app"))
        .output()
        .expect("the lean program runs");
    assert!(ran.status.success());
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        "usage: lean-app POSTGRES_URL\n"
    );
}

#[test]
fn with_the_defaults_the_embedded_journal_and_file_vault_come_in() {
    let dir = lean_app(true);
    let names = packages(dir.path());
    for embedded in [
        "sallyport-sqlite",
        "rusqlite",
        "sallyport-vault",
        "argon2",
        "chacha20poly1305",
        // The answer guards' secret rules are a default too (issue 40).
        "sallyport-secrets",
    ] {
        assert!(
            names.iter().any(|n| n == embedded),
            "{embedded} missing from {names:?}"
        );
    }
    for never in ["serde_norway", "keyring-core", "sallyport-openapi"] {
        assert!(
            !names.iter().any(|n| n == never),
            "{never} compiled by default"
        );
    }
}
