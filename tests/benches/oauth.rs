#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]
//! What attaching a cached OAuth access token costs against today's bearer path, in the
//! same run: two executors, each with its own SQLite journal (in `/dev/shm` when there is
//! one) and a `MemoryVault`, calling one observe GET at a time against the same loopback
//! upstream that answers at once.
//!
//! - `oauth_attach/bearer`: a static bearer credential (attached at bind, stage 6).
//! - `oauth_attach/oauth_cached_token`: an `oauth_client_credentials` credential whose
//!   access token (valid for an hour) is cached in the vault's grant store: read at send
//!   time, checked for freshness, and put in the `Authorization` header. The token endpoint
//!   (another loopback upstream) is asked once, before measuring, and the bench checks that
//!   it was not asked again.
//!
//! The difference of the two medians is the cost of the cached-token path per call (target
//! ≤ 1 µs).
//!
//! Run: `cargo bench -p sallyport-tests --bench oauth -- --measurement-time 5 --warm-up-time 1`

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, MemoryVault, OAuthClient, Secret,
};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Reply, Upstream};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Read one build.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_build", effect = observe, credential = "ci")]
#[http(get = "/v1/builds/{build_id}", result = Build)]
struct GetBuild {
    build_id: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Build {
    id: String,
    state: String,
}

fn executor(dir: &std::path::Path, name: &str, vault: Arc<MemoryVault>) -> Executor {
    Executor::builder(
        Catalog::builder()
            .action::<GetBuild>()
            .build()
            .expect("catalog"),
    )
    .journal(SqliteJournal::open(dir.join(format!("{name}.db"))).expect("journal"))
    .vault_arc(vault)
    .channel(HttpChannel::builder().build().expect("channel"))
    .build()
    .expect("executor")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let upstream = rt.block_on(Upstream::start_with(
        |_| Reply::Json(200, json!({"id": "build_1", "state": "passed"})),
        false,
    ));
    let token = rt.block_on(Upstream::start_with(
        |_| {
            Reply::Json(
                200,
                json!({"access_token": "bench-access-token-0123456789abcdef", "token_type": "Bearer", "expires_in": 3600}),
            )
        },
        false,
    ));
    let dir = tempfile::Builder::new()
        .prefix("sallyport-oauth-bench")
        .tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        })
        .expect("tempdir");

    let bearer_vault = Arc::new(MemoryVault::new());
    bearer_vault.set(
        CredentialMeta::new("ci", CredentialKind::Bearer, Binding::url(upstream.url())),
        Secret::new("bench-static-token-0123456789abcdef"),
    );
    let oauth_vault = Arc::new(MemoryVault::new());
    oauth_vault.set(
        CredentialMeta::new(
            "ci",
            CredentialKind::OAuthClientCredentials(OAuthClient::new(
                "bench",
                format!("{}/token", token.url()),
            )),
            Binding::url(upstream.url()),
        ),
        Secret::new("bench-client-secret-0123456789"),
    );
    let bearer = Arc::new(executor(dir.path(), "bearer", bearer_vault));
    let oauth = Arc::new(executor(dir.path(), "oauth", oauth_vault));
    let session = Arc::new(Session::new("bench"));
    let call = |executor: Arc<Executor>, session: Arc<Session>| async move {
        let r = executor
            .call("get_build", json!({"build_id": "b1"}), &session)
            .await;
        assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    };
    // The one token request, before measuring.
    rt.block_on(call(Arc::clone(&oauth), Arc::clone(&session)));
    assert_eq!(token.requests(), 1);

    let mut group = c.benchmark_group("oauth_attach");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("bearer", |b| {
        b.to_async(&rt)
            .iter(|| call(Arc::clone(&bearer), Arc::clone(&session)));
    });
    group.bench_function("oauth_cached_token", |b| {
        b.to_async(&rt)
            .iter(|| call(Arc::clone(&oauth), Arc::clone(&session)));
    });
    group.finish();
    assert_eq!(token.requests(), 1, "the cached token was used throughout");
}

criterion_group!(benches, bench);
criterion_main!(benches);
