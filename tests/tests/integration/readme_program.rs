//! The README's first program, as a new user builds it (issue 41): its dependency block and
//! its two Rust blocks (`src/bin/setup.rs`, `src/main.rs`) taken from `README.md` itself,
//! assembled into a crate outside the workspace with path dependencies on ours, built
//! offline against the workspace's `Cargo.lock` (as `lean_build` does), and run against a
//! real HTTP server on 127.0.0.1: the setup puts the token into a new vault, the program
//! unlocks it from the passphrase file and its read comes back `completed` with the
//! server's answer. The consented call finds no terminal and sends nothing.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use sallyport_tests::http_server::{Reply, Upstream};

/// The heading of the README section that holds the program.
const SECTION: &str = "## Your first program";
const TOKEN: &str = "readme-token-5f1c9e";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// The fenced blocks of the README's program section, as (info string, text).
fn section_blocks(readme: &str) -> Vec<(String, String)> {
    let start = readme
        .find(SECTION)
        .expect("the README has its program section");
    let rest = &readme[start + SECTION.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    let mut blocks = Vec::new();
    let mut lines = rest[..end].lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let mut text = String::new();
        for body in lines.by_ref() {
            if body.starts_with("```") {
                break;
            }
            text.push_str(body);
            text.push('\n');
        }
        blocks.push((info.to_owned(), text));
    }
    blocks
}

/// The README's dependency block with our crates as path dependencies (published versions
/// are what a user names; the test builds the workspace's own sources).
fn manifest(dependencies: &str) -> String {
    let root = workspace();
    let mut out = String::from(
        "[package]\nname = \"readme-app\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n[workspace]\n\n",
    );
    for line in dependencies.lines() {
        let ours = ["sallyport-core", "sallyport-http"]
            .into_iter()
            .find(|krate| line.starts_with(&format!("{krate} = \"0.1\"")));
        match ours {
            Some(krate) => out.push_str(&format!(
                "{krate} = {{ path = \"{}\" }}\n",
                root.join(krate).display()
            )),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_program_builds_outside_the_workspace_and_its_read_completes() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let blocks = section_blocks(&readme);
    let infos: Vec<&str> = blocks.iter().map(|(info, _)| info.as_str()).collect();
    assert_eq!(
        infos,
        ["toml", "rust,no_run", "rust,no_run", "text"],
        "the program section's blocks changed; update this test with it"
    );
    let (toml, setup, program) = (&blocks[0].1, &blocks[1].1, &blocks[2].1);
    assert!(
        toml.starts_with("[dependencies]\n"),
        "the dependency block starts with [dependencies]: {toml}"
    );
    for krate in ["sallyport-core", "sallyport-http"] {
        assert!(
            toml.contains(&format!("\n{krate} = \"0.1\"")),
            "{krate} missing from {toml}"
        );
    }

    // The crate, outside the workspace.
    let app = tempfile::tempdir().expect("tempdir");
    std::fs::write(app.path().join("Cargo.toml"), manifest(toml)).expect("manifest");
    std::fs::create_dir_all(app.path().join("src/bin")).expect("src/bin");
    std::fs::write(app.path().join("src/bin/setup.rs"), setup).expect("setup.rs");
    std::fs::write(app.path().join("src/main.rs"), program).expect("main.rs");
    std::fs::copy(
        workspace().join("Cargo.lock"),
        app.path().join("Cargo.lock"),
    )
    .expect("lock");

    // Built offline, in the target directory the crates built outside the workspace share
    // (beside the workspace's; see `lean_build`).
    let target = workspace().join("target/outside");
    let built = Command::new(env!("CARGO"))
        .args(["build", "--offline", "--quiet", "--bins"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(app.path())
        .output()
        .expect("cargo build runs");
    assert!(
        built.status.success(),
        "the README's program does not build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    // Warnings are part of the first impression too.
    assert_eq!(
        String::from_utf8_lossy(&built.stderr),
        "",
        "the README's program builds with warnings"
    );

    // The API it talks to.
    let upstream = Upstream::start(|req| {
        if req.method == "GET" && req.path == "/v1/projects/proj_42/deployments/dep_2388" {
            Reply::Json(
                200,
                json!({"deployment_id": "dep_2388", "operation_status": "ready",
                       "internal_note": "not a declared field"}),
            )
        } else {
            Reply::Json(404, json!({"error": "no such route"}))
        }
    })
    .await;

    // Where the user runs it: the passphrase file (0600), then the setup.
    let run = tempfile::tempdir().expect("tempdir");
    let passphrase = run.path().join("vault.passphrase");
    write_private(&passphrase, "a passphrase only this test knows\n");
    let mut setup = Command::new(target.join("debug/setup"))
        .arg(upstream.url())
        .current_dir(run.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setup starts");
    setup
        .stdin
        .take()
        .expect("stdin")
        .write_all(TOKEN.as_bytes())
        .expect("token written");
    let set_up = setup.wait_with_output().expect("setup ends");
    assert!(
        set_up.status.success(),
        "setup failed: {}",
        String::from_utf8_lossy(&set_up.stderr)
    );
    assert!(run.path().join("vault.sallyport").is_file());

    // The program, in a session of its own: no controlling terminal, so the consent prompt
    // for the deployment cannot be answered, whoever runs the test.
    let program = target.join("debug/readme-app");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("setsid")
            .arg(program)
            .current_dir(run.path())
            .stdin(Stdio::null())
            .output()
            .map(|out| (out, run))
    })
    .await
    .expect("join")
    .expect("setsid runs the program");
    let (out, _run) = out;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the program failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is a result's JSON"))
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");

    let read = &lines[0];
    assert_eq!(read["status"], "completed", "{read}");
    assert_eq!(read["action"], "get_deployment_status");
    assert_eq!(
        read["data"],
        json!({"deployment_id": "dep_2388", "operation_status": "ready"})
    );
    assert!(read["receipt_id"].as_str().is_some_and(|r| !r.is_empty()));

    let deploy = &lines[1];
    assert_eq!(deploy["status"], "rejected", "{deploy}");
    assert_eq!(deploy["action"], "create_preview_deployment");
    assert_eq!(deploy["code"], "consent_unavailable");

    // One request reached the server: the read, with the vault's token. The deployment,
    // unapproved, sent nothing.
    let received = upstream.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0].method, "GET");
    assert_eq!(
        received[0].header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert!(!stdout.contains(TOKEN));
}

fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .expect("passphrase file");
    file.write_all(text.as_bytes()).expect("passphrase written");
}
