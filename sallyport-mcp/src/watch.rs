//! Re-reading a baseline lockfile while the server runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sallyport_core::drift::{Baseline, BaselineGuard};

/// Polls the lockfile at `path` every `every` and, when it holds a different valid baseline,
/// gives it to `guard` (which bumps its generation, so every MCP connection is told
/// `tools/list_changed`). A file that is missing or does not parse leaves the current
/// baseline in force. Stops when the returned task is aborted.
pub fn watch_lockfile(
    guard: Arc<BaselineGuard>,
    path: impl Into<PathBuf>,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    let path = path.into();
    tokio::spawn(async move {
        let mut last = String::new();
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let Ok(text) = tokio::fs::read_to_string(&path).await else {
                continue;
            };
            if text == last {
                continue;
            }
            match Baseline::from_json(&text, &path.display().to_string()) {
                Ok(baseline) => {
                    last = text;
                    if baseline.baseline_id != guard.baseline().baseline_id {
                        let generation = guard.replace_baseline(baseline);
                        tracing::info!(generation, path = %path.display(), "baseline replaced");
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "baseline lockfile ignored; the current baseline stays");
                }
            }
        }
    })
}
