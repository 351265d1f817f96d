//! `sallyport scaffold` as a real process: the command line writes the module, lists what it
//! could not generate, keeps an existing file without `--force`, prints to standard output
//! without `--out`, and exits non-zero only when nothing could be generated. What the
//! generator itself writes is tested in `sallyport-scaffold/tests`.

use std::path::Path;
use std::process::{Command, Output};

use sallyport_openapi::OpenApi;
use sallyport_scaffold::{Generated, Scaffold};

const TICKETS_30: &str = include_str!("../../../tests/fixtures/openapi/scaffold/tickets-3.0.yaml");
const TICKETS_31: &str = include_str!("../../../tests/fixtures/openapi/scaffold/tickets-3.1.json");

fn generate(text: &str, operations: &[&str]) -> Generated {
    let api = OpenApi::parse(text).expect("document parses");
    Scaffold::new(&api)
        .operations(operations.iter().copied())
        .generate()
}

fn scaffold(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .arg("scaffold")
        .args(args)
        .env_remove("SALLYPORT_VAULT")
        .output()
        .expect("the CLI runs")
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/openapi/scaffold")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn the_command_writes_the_module_lists_what_it_could_not_generate_and_keeps_an_existing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("actions.rs");
    let out_arg = out.display().to_string();
    let doc = fixture("tickets-3.0.yaml");
    let args = [
        "--openapi",
        &doc,
        "--operation",
        "createTicket",
        "--operation",
        "subscribe",
        "--operation",
        "getTicket",
        "--credential",
        "tickets-api",
        "--out",
        &out_arg,
    ];
    let output = scaffold(&args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(output.stdout.is_empty());
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "sallyport scaffold: not generated: subscribe: it declares callbacks: an action is one request and its answer, and sallyport does not receive the upstream's later calls",
            "sallyport scaffold: create_ticket (createTicket): choose effect, consent, retry (it does not compile until you do)",
        ]
    );
    let written = std::fs::read_to_string(&out).expect("module written");
    let api = OpenApi::parse(TICKETS_30).expect("parses");
    let expected = Scaffold::new(&api)
        .operations(["createTicket", "subscribe", "getTicket"])
        .credential("tickets-api")
        .generate();
    assert_eq!(written, expected.code);
    assert_eq!(
        written
            .matches("    credential = \"tickets-api\",\n")
            .count(),
        2
    );

    // The file may hold the author's decisions now: it is not replaced without --force.
    std::fs::write(&out, "// decided\n").expect("edit");
    let again = scaffold(&args);
    assert_eq!(again.status.code(), Some(6));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force replaces it"));
    assert_eq!(std::fs::read_to_string(&out).expect("kept"), "// decided\n");
    let mut forced = args.to_vec();
    forced.push("--force");
    assert_eq!(scaffold(&forced).status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(&out).expect("replaced"),
        expected.code
    );
}

#[test]
fn the_command_prints_to_standard_output_and_exits_12_when_nothing_could_be_generated() {
    let doc = fixture("tickets-3.1.json");
    let output = scaffold(&["--openapi", &doc, "--operation", "getTicket"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        generate(TICKETS_31, &["getTicket"]).code
    );
    assert!(output.stderr.is_empty(), "no decision left open");

    let output = scaffold(&[
        "--openapi",
        &doc,
        "--operation",
        "mergeTickets",
        "--operation",
        "uploadAttachment",
    ]);
    assert_eq!(output.status.code(), Some(12));
    assert!(output.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&output.stderr)
            .lines()
            .collect::<Vec<_>>(),
        [
            "sallyport scaffold: not generated: mergeTickets: its JSON body: it is a `oneOf` of several object shapes",
            "sallyport scaffold: not generated: uploadAttachment: its request body is multipart/form-data, not JSON; the HTTP channel sends JSON bodies",
            "sallyport: none of the operations could be generated",
        ]
    );
}
