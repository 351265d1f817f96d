//! Waiting for several child processes at once: [`wait_all`].
//!
//! Waiting for them one after another with [`Child::wait_with_output`] reads only the child
//! being waited for. Another child that prints more than a pipe holds (64 KiB on Linux)
//! blocks in its `write`; one whose async workers print blocks them all, mid-transaction
//! if it was in one, and the child being waited for may wait on that transaction's lock
//! forever. That is how a fleet test (four executors on one PostgreSQL journal) once hung
//! CI: one executor's record batch held the chain head, stuck behind its own full stderr.

use std::process::{Child, Command, Output};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Waits for every child, reading all their outputs at the same time, and returns each
/// child's output in the order given.
///
/// # Panics
///
/// When a child is still running `within` from now: every child still running is killed
/// and the panic shows the end of what each printed, so a hang fails the test with its
/// evidence instead of stalling the run. Also when a child's output cannot be read.
pub fn wait_all(children: Vec<Child>, within: Duration) -> Vec<Output> {
    let deadline = Instant::now() + within;
    let (done, finished) = mpsc::channel();
    let ids: Vec<u32> = children.iter().map(Child::id).collect();
    for (i, child) in children.into_iter().enumerate() {
        let done = done.clone();
        std::thread::spawn(move || {
            let _ = done.send((i, child.wait_with_output()));
        });
    }
    drop(done);
    let mut outputs: Vec<Option<Output>> = ids.iter().map(|_| None).collect();
    let mut overdue = false;
    while outputs.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        let received = if overdue {
            finished
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected)
        } else {
            finished.recv_timeout(left)
        };
        match received {
            Ok((i, output)) => {
                outputs[i] = Some(output.unwrap_or_else(|e| panic!("child {i}: {e}")));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                overdue = true;
                for (i, id) in ids.iter().enumerate() {
                    if outputs[i].is_none() {
                        kill(*id);
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if overdue {
        let mut report = String::new();
        for (i, output) in outputs.iter().enumerate() {
            let Some(output) = output else { continue };
            if output.status.success() {
                continue;
            }
            report.push_str(&format!(
                "\n--- child {i} (pid {}), {}:\nstdout ends: {}\nstderr ends: {}",
                ids[i],
                output.status,
                tail(&output.stdout),
                tail(&output.stderr)
            ));
        }
        panic!(
            "children still running {} s after they were waited for were killed:{report}",
            within.as_secs()
        );
    }
    outputs
        .into_iter()
        .enumerate()
        .map(|(i, o)| o.unwrap_or_else(|| panic!("child {i}: its waiting thread ended")))
        .collect()
}

/// Kills process `id` with SIGKILL (through kill(1): the workspace has no `unsafe`).
fn kill(id: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &id.to_string()])
        .status();
}

/// The last 2,000 bytes of `bytes`, as text.
fn tail(bytes: &[u8]) -> String {
    let from = bytes.len().saturating_sub(2000);
    String::from_utf8_lossy(&bytes[from..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    fn sh(script: &str) -> Child {
        Command::new("sh")
            .args(["-c", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sh")
    }

    #[test]
    fn a_child_printing_more_than_a_pipe_holds_does_not_block_the_first_one() {
        // The first child ends only once the second has printed 1 MiB to stderr: waited
        // for one after another, the second would block on its full pipe and neither end.
        let dir = tempfile::tempdir().expect("tempdir");
        let flag = dir.path().join("printed");
        let flag = flag.display();
        let first = sh(&format!(
            "while [ ! -e {flag} ]; do sleep 0.05; done; echo first"
        ));
        let second = sh(&format!(
            "head -c 1048576 /dev/zero | tr '\\0' x >&2; touch {flag}; echo second"
        ));
        let outputs = wait_all(vec![first, second], Duration::from_secs(60));
        assert_eq!(outputs[0].stdout, b"first\n");
        assert_eq!(outputs[1].stdout, b"second\n");
        assert_eq!(outputs[1].stderr.len(), 1 << 20);
    }

    #[test]
    fn a_child_past_the_deadline_is_killed_and_the_panic_shows_its_output() {
        let started = Instant::now();
        let hung = std::panic::catch_unwind(|| {
            wait_all(
                vec![sh("echo done"), sh("echo stuck-here >&2; exec sleep 600")],
                Duration::from_millis(500),
            )
        });
        let message = *hung
            .expect_err("a hung child fails the wait")
            .downcast::<String>()
            .expect("a message");
        assert!(message.contains("child 1"), "{message}");
        assert!(message.contains("stuck-here"), "{message}");
        assert!(!message.contains("child 0"), "{message}");
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}
