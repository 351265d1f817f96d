//! `baseline diff` / `baseline approve` end to end through the library entry point an
//! application's own `main` calls: a lockfile in a tempdir, an action that changes, the diff
//! that shows it and the approval that writes it.

use sallyport_cli::baseline::{BaselineExit, run_baseline_command};
use sallyport_core::drift::Baseline;
use sallyport_core::{Action, Catalog};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// Read one build of a project.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_build", effect = observe)]
#[channel(name = "test")]
#[allow(dead_code)]
struct GetBuild {
    #[scope(project)]
    project_id: String,
    build_id: String,
}

/// Restart one worker of a project.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "restart_worker", effect = reversible_change)]
#[channel(name = "test")]
#[allow(dead_code)]
struct RestartWorker {
    #[scope(project)]
    project_id: String,
    worker: String,
}

fn catalog() -> Catalog {
    Catalog::builder()
        .action::<GetBuild>()
        .action::<RestartWorker>()
        .build()
        .expect("catalog")
}

fn escalated() -> Catalog {
    Catalog::builder()
        .action::<GetBuild>()
        .action_with_spec::<RestartWorker>(|s| {
            s.with_externality(sallyport_core::action::Externality::External)
        })
        .build()
        .expect("catalog")
}

fn run(catalog: &Catalog, args: &[&str]) -> (BaselineExit, String) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let mut out = Vec::new();
    let exit = run_baseline_command(catalog, &args, &mut out);
    (exit, String::from_utf8(out).expect("utf8"))
}

#[test]
fn diff_approve_change_diff_approve() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lockfile = dir.path().join("sallyport.baseline.json");
    let lock = lockfile.to_str().expect("utf8 path");

    // No lockfile yet: every action is new, nothing is callable, the diff says so.
    let (exit, out) = run(&catalog(), &["baseline", "diff", "--lockfile", lock]);
    assert_eq!(exit, BaselineExit::Drift);
    assert_eq!(exit.code(), 1);
    let empty = Baseline::empty().baseline_id;
    assert!(
        out.starts_with(&format!(
            "baseline {empty} ({lock}, not found: empty): 2 actions, 2 drifted\n"
        )),
        "{out}"
    );
    assert!(out.contains("  review_required  get_build  deferred · severity medium (50) · approve_new_baseline · tool_added\n"), "{out}");
    assert!(!lockfile.exists(), "diff never writes");

    // Approve everything.
    let (exit, out) = run(&catalog(), &["baseline", "approve", "--lockfile", lock]);
    assert_eq!(exit, BaselineExit::Clean);
    let approved = Baseline::load(&lockfile).expect("lockfile written");
    assert_eq!(approved, Baseline::from_catalog(&catalog()));
    assert_eq!(
        out,
        format!(
            "approved all 2 actions: baseline {empty} -> {} written to {lock}\n",
            approved.baseline_id
        )
    );

    // Clean.
    let (exit, out) = run(&catalog(), &["diff", &format!("--lockfile={lock}")]);
    assert_eq!(exit, BaselineExit::Clean);
    assert_eq!(
        out,
        format!(
            "baseline {} ({lock}): 2 actions, 0 drifted\n  clean            get_build\n  clean            restart_worker\n",
            approved.baseline_id
        )
    );

    // The application changes an action: the diff shows exactly that change.
    let (exit, out) = run(&escalated(), &["baseline", "diff", "--lockfile", lock]);
    assert_eq!(exit, BaselineExit::Drift);
    assert_eq!(
        out,
        format!(
            "baseline {} ({lock}): 2 actions, 1 drifted\n  clean            get_build\n  quarantined      restart_worker  denied · severity high (80) · keep_quarantined · externality_changed\n      /externality: \"internal\" -> \"external\"\nreview the changes, then run `baseline approve [ACTION...]` to accept them\n",
            approved.baseline_id
        )
    );

    // The same as JSON: full decision objects.
    let (exit, out) = run(
        &escalated(),
        &[
            "baseline",
            "diff",
            "--json",
            "--lockfile",
            lock,
            "--server-id",
            "builds-app",
        ],
    );
    assert_eq!(exit, BaselineExit::Drift);
    let doc: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(doc["baseline_id"], approved.baseline_id.as_str());
    assert_eq!(doc["drift_detected"], true);
    let decisions = doc["decisions"].as_array().expect("array");
    assert_eq!(decisions.len(), 2);
    let d = &decisions[1];
    assert_eq!(d["tool_name"], "restart_worker");
    assert_eq!(d["server_id"], "builds-app");
    assert_eq!(d["gateway_id"], "sallyport");
    assert_eq!(d["drift_status"], "quarantined");
    assert_eq!(d["core_disposition"], "denied");
    assert_eq!(d["reasons"], serde_json::json!(["externality_changed"]));
    assert_eq!(
        d["changes"],
        serde_json::json!([{"field": "/externality", "before": "internal", "after": "external"}])
    );
    assert_eq!(
        d["live_tool_hash"],
        escalated()
            .get("restart_worker")
            .expect("entry")
            .definition_hash()
    );
    assert_eq!(
        d["baseline_tool_hash"],
        catalog()
            .get("restart_worker")
            .expect("entry")
            .definition_hash()
    );

    // Approve only that action; the diff is clean again and the lockfile changed only there.
    let (exit, _) = run(
        &escalated(),
        &["baseline", "approve", "restart_worker", "--lockfile", lock],
    );
    assert_eq!(exit, BaselineExit::Clean);
    let after = Baseline::load(&lockfile).expect("lockfile");
    assert_eq!(after.actions["get_build"], approved.actions["get_build"]);
    assert_ne!(
        after.actions["restart_worker"],
        approved.actions["restart_worker"]
    );
    assert_eq!(after, Baseline::from_catalog(&escalated()));
    let (exit, _) = run(&escalated(), &["baseline", "diff", "--lockfile", lock]);
    assert_eq!(exit, BaselineExit::Clean);
}

#[test]
fn approving_a_removed_action_drops_it_and_unknown_names_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lockfile = dir.path().join("lock.json");
    let lock = lockfile.to_str().expect("utf8 path");
    run(&catalog(), &["baseline", "approve", "--lockfile", lock]);
    let smaller = Catalog::builder()
        .action::<GetBuild>()
        .build()
        .expect("catalog");
    let (exit, out) = run(&smaller, &["baseline", "diff", "--lockfile", lock]);
    assert_eq!(exit, BaselineExit::Drift);
    assert!(out.contains("  changed          restart_worker  allowed · severity low (20) · approve_new_baseline · tool_removed\n"), "{out}");
    let (exit, _) = run(
        &smaller,
        &["baseline", "approve", "restart_worker", "--lockfile", lock],
    );
    assert_eq!(exit, BaselineExit::Clean);
    assert_eq!(
        Baseline::load(&lockfile).expect("lockfile"),
        Baseline::from_catalog(&smaller)
    );

    let (exit, out) = run(
        &smaller,
        &["baseline", "approve", "no_such_action", "--lockfile", lock],
    );
    assert_eq!(exit, BaselineExit::Error);
    assert_eq!(
        out,
        "error: no action named `no_such_action` in the catalog or the baseline\n"
    );
}

#[test]
fn bad_arguments_and_bad_lockfiles_exit_2_with_a_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (exit, out) = run(&catalog(), &["baseline", "frobnicate"]);
    assert_eq!(exit, BaselineExit::Error);
    assert!(
        out.starts_with("error: unknown baseline command `frobnicate`\nusage:\n"),
        "{out}"
    );
    let (exit, out) = run(&catalog(), &["baseline", "diff", "--lockfile"]);
    assert_eq!(exit, BaselineExit::Error);
    assert!(
        out.starts_with("error: --lockfile needs a value\n"),
        "{out}"
    );
    let (exit, out) = run(&catalog(), &["baseline", "diff", "get_build"]);
    assert_eq!(exit, BaselineExit::Error);
    assert!(
        out.starts_with("error: `baseline diff` takes no action names (got `get_build`)\n"),
        "{out}"
    );
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "{not json").expect("write");
    let (exit, out) = run(
        &catalog(),
        &[
            "baseline",
            "diff",
            "--lockfile",
            garbage.to_str().expect("utf8"),
        ],
    );
    assert_eq!(exit, BaselineExit::Error);
    assert!(
        out.starts_with(&format!(
            "error: {} is not a sallyport baseline lockfile: ",
            garbage.display()
        )),
        "{out}"
    );
    let (exit, out) = run(&catalog(), &["baseline", "--help"]);
    assert_eq!(exit, BaselineExit::Clean);
    assert!(out.starts_with("usage:\n  baseline diff"), "{out}");
}
