//! A 100 MiB output flood through the SSH channel stays within the cap with bounded memory.
//! Alone in its own test binary so the process's memory figures are its own.

use std::time::Instant;

use sallyport_core::target::{SshTarget, Target};
use sallyport_core::{Action, ActionSpec, Catalog, EffectClass, Session, Status};
use sallyport_ssh::SshChannel;
use sallyport_tests::sshd::Sshd;
use sallyport_tests::sshd::fixture::{self, KEY_CREDENTIAL, KEY_HOST};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

const FLOOD: u64 = 100 * 1024 * 1024;

/// Write `bytes` zero bytes to stdout and as many to stderr.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the channel reads the field from the JSON arguments"
)]
struct Flood {
    bytes: u64,
}

impl Action for Flood {
    const NAME: &'static str = "flood";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("flood", EffectClass::Observe)
            .with_description("Write zeros to each output stream.")
            .with_credential(KEY_CREDENTIAL)
            .with_target(Target::Ssh(SshTarget::new(
                KEY_HOST,
                [
                    "sh",
                    "-c",
                    "head -c \"$1\" /dev/zero & head -c \"$1\" /dev/zero >&2; wait",
                    "sh",
                    "{bytes}",
                ],
            )))
    }
}

/// `VmHWM` (peak resident set) or `VmRSS` of this process, in KiB.
fn memory_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_mebibyte_flood_stays_within_the_cap_with_bounded_memory() {
    let sshd = Sshd::start();
    let h = fixture::harness(
        Catalog::builder().action::<Flood>().build().unwrap(),
        SshChannel::new(fixture::inventory(&sshd)),
        fixture::vault_with_key(&sshd.client_key()),
    );
    let session = Session::new("flood");
    // Warm up (connection, journal, allocator) so the measurement sees only the flood.
    let warm = h
        .executor
        .call("flood", json!({"bytes": 1024 * 1024}), &session)
        .await;
    assert_eq!(warm.status, Status::Completed, "{}", warm.to_json());
    let peak_before = memory_kib("VmHWM:");
    let started = Instant::now();
    let result = h
        .executor
        .call("flood", json!({"bytes": FLOOD}), &session)
        .await;
    let elapsed = started.elapsed();
    let peak_after = memory_kib("VmHWM:");
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    let data = result.data.as_ref().unwrap();
    assert_eq!(data["stdout"].as_str().unwrap().len(), 64 * 1024);
    assert_eq!(data["stderr"].as_str().unwrap().len(), 64 * 1024);
    assert_eq!(data["stdout_bytes"], FLOOD);
    assert_eq!(data["stderr_bytes"], FLOOD);
    assert_eq!(data["stdout_truncated"], true);
    assert_eq!(data["stderr_truncated"], true);
    // 200 MiB went through; the peak grew by at most 16 MiB (the two caps, russh's channel
    // buffers and the SSH window), never by anything near the flood.
    let growth = peak_after.saturating_sub(peak_before);
    eprintln!(
        "flood: 2 x 100 MiB in {elapsed:?}; VmHWM {peak_before} -> {peak_after} KiB (+{growth} KiB); VmRSS {} KiB",
        memory_kib("VmRSS:")
    );
    assert!(growth < 16 * 1024, "peak memory grew by {growth} KiB");
}
