//! Payload drift logging: warn mode logs through `tracing`, shadow mode does not, and no
//! argument value is ever logged. A test binary of its own, because `tracing`'s per-callsite
//! interest cache is process-wide and other tests' threads would race the subscriber.

use std::sync::{Arc, Mutex};

use sallyport_core::drift::DriftMode;
use sallyport_core::journal::{Journal, SqliteJournal};
use sallyport_core::outcome::Status;
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_tests::scripted::ScriptedChannel;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Read one build of a project.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_build", effect = observe)]
#[channel(name = "test")]
#[serde(deny_unknown_fields)]
struct GetBuild {
    #[scope(project)]
    project_id: String,
    build_id: String,
}

#[test]
fn warn_mode_logs_a_warning_and_shadow_mode_logs_nothing() {
    for (mode, expect_log) in [(DriftMode::Warn, true), (DriftMode::Shadow, false)] {
        let buffer = Arc::new(Mutex::new(Vec::<u8>::new()));
        let writer_buffer = Arc::clone(&buffer);
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || BufferWriter(Arc::clone(&writer_buffer)))
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let dir = tempfile::tempdir().expect("tempdir");
                let journal =
                    Arc::new(SqliteJournal::open(dir.path().join("j.db")).expect("journal"));
                let executor = Executor::builder(
                    Catalog::builder()
                        .action::<GetBuild>()
                        .build()
                        .expect("catalog"),
                )
                .journal_arc(journal.clone())
                .channel(ScriptedChannel::new())
                .drift_mode(mode)
                .build()
                .expect("executor");
                let session = Session::new("s").allow("project", ["proj_1"]);
                let r = executor
                    .call(
                        "get_build",
                        json!({"project_id": "proj_1", "build_id": "build_1", "verbose": true}),
                        &session,
                    )
                    .await;
                assert_eq!(r.status, Status::Completed);
                assert_eq!(
                    journal.records().await.expect("records")[0]
                        .event
                        .divergences
                        .len(),
                    1
                );
            });
        });
        let logged = String::from_utf8(buffer.lock().expect("buffer").clone()).expect("utf8");
        assert_eq!(
            logged.contains("payload drift allowed in warn mode"),
            expect_log,
            "{mode:?}: {logged}"
        );
        assert!(
            !logged.contains("proj_1"),
            "argument values are never logged: {logged}"
        );
    }
}

struct BufferWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for BufferWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
