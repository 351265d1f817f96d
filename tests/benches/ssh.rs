#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]

//! SSH channel benchmarks against a real sshd on loopback.
//!
//! `ssh_exec/raw_russh_exec_open_session` and `ssh_exec/executor_pooled_call` run the same
//! command (`true`) in the same run: the first on an already open, authenticated russh
//! session, the second through the whole executor pipeline (validation, SQLite journal,
//! audit chain, scrubbing) on a pooled connection. `ssh_cold/executor_cold_call` pays for the
//! TCP connect, handshake and authentication on every call.
//!
//! Run: `cargo bench -p sallyport-tests --bench ssh`

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use russh::ChannelMsg;
use russh::client::{self, Handle};
use russh::keys::{PrivateKeyWithHashAlg, PublicKeyOrCertificate, decode_secret_key};
use sallyport_core::target::{SshTarget, Target};
use sallyport_core::{Action, ActionSpec, Catalog, EffectClass, Session, Status};
use sallyport_ssh::{HostKeyPin, SshChannel};
use sallyport_tests::sshd::Sshd;
use sallyport_tests::sshd::fixture::{self, KEY_CREDENTIAL, KEY_HOST};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Run `true`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Noop {}

impl Action for Noop {
    const NAME: &'static str = "noop";
    type Output = sallyport_core::target::CommandOutput;

    fn spec() -> ActionSpec {
        ActionSpec::new("noop", EffectClass::Observe)
            .with_description("Run `true`.")
            .with_credential(KEY_CREDENTIAL)
            .with_target(Target::Ssh(SshTarget::new(KEY_HOST, ["true"])))
    }
}

/// The same pipeline over a channel that sends nothing: what the executor itself costs.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoopLocal {}

impl Action for NoopLocal {
    const NAME: &'static str = "noop_local";
    type Output = serde_json::Value;

    fn spec() -> ActionSpec {
        ActionSpec::new("noop_local", EffectClass::Observe)
            .with_description("Do nothing, locally.")
            .with_target(Target::custom("local", json!({})))
    }
}

#[derive(Debug)]
struct LocalChannel;

#[async_trait::async_trait]
impl sallyport_core::Channel for LocalChannel {
    fn name(&self) -> &str {
        "local"
    }

    fn prepare(
        &self,
        call: &sallyport_core::channel::CallView<'_>,
    ) -> Result<Box<dyn sallyport_core::channel::PreparedRequest>, sallyport_core::outcome::Refusal>
    {
        Ok(Box::new(sallyport_core::channel::DescribedRequest::new(
            "local",
            call.arguments.clone(),
        )))
    }

    async fn dispatch(
        &self,
        call: sallyport_core::channel::Dispatch<'_>,
    ) -> sallyport_core::channel::ChannelOutcome {
        match call.context.permit().await {
            Ok(permit) => permit.sending(),
            Err(refused) => return refused,
        }
        sallyport_core::channel::ChannelOutcome::completed(json!({}))
    }
}

struct Pinned(HostKeyPin);

impl client::Handler for Pinned {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(matches!(key, PublicKeyOrCertificate::PublicKey { key, .. } if self.0.matches(key)))
    }
}

async fn raw_session(sshd: &Sshd) -> Handle<Pinned> {
    let config = Arc::new(client::Config {
        nodelay: true,
        ..client::Config::default()
    });
    let pin = HostKeyPin::parse(&sshd.host_public_key()).unwrap();
    let mut handle = client::connect(config, ("127.0.0.1", sshd.port()), Pinned(pin))
        .await
        .unwrap();
    let key = decode_secret_key(&sshd.client_key(), None).unwrap();
    let auth = handle
        .authenticate_publickey("root", PrivateKeyWithHashAlg::new(Arc::new(key), None))
        .await
        .unwrap();
    assert!(auth.success());
    handle
}

async fn raw_exec(handle: &Handle<Pinned>) -> u32 {
    let mut channel = handle.channel_open_session().await.unwrap();
    channel.exec(true, "true").await.unwrap();
    let mut code = None;
    while let Some(msg) = channel.wait().await {
        match msg {
            ChannelMsg::ExitStatus { exit_status } => code = Some(exit_status),
            ChannelMsg::Close => break,
            _ => {}
        }
    }
    code.unwrap()
}

fn ssh(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sshd = Sshd::start();
    let channel = SshChannel::new(fixture::inventory(&sshd));
    let h = fixture::harness(
        Catalog::builder().action::<Noop>().build().unwrap(),
        channel.clone(),
        fixture::vault_with_key(&sshd.client_key()),
    );
    // The harness's executor has no `local` channel; a second executor over the same kind of
    // journal measures the pipeline alone.
    let local_dir = tempfile::tempdir().unwrap();
    let local = sallyport_core::Executor::builder(
        Catalog::builder().action::<NoopLocal>().build().unwrap(),
    )
    .journal(sallyport_core::journal::SqliteJournal::open(local_dir.path().join("j.db")).unwrap())
    .channel(LocalChannel)
    .build()
    .unwrap();
    let session = Session::new("bench");
    let raw = rt.block_on(raw_session(&sshd));
    // Pre-warm both: the first exec on a new connection is slow on the server side.
    rt.block_on(async {
        assert_eq!(raw_exec(&raw).await, 0);
        let r = h.executor.call("noop", json!({}), &session).await;
        assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    });

    let mut group = c.benchmark_group("ssh_exec");
    group.measurement_time(Duration::from_secs(8));
    group.bench_function("raw_russh_exec_open_session", |b| {
        b.to_async(&rt).iter(|| raw_exec(&raw));
    });
    group.bench_function("executor_pooled_call", |b| {
        b.to_async(&rt)
            .iter(|| h.executor.call("noop", json!({}), &session));
    });
    group.bench_function("executor_local_noop_channel", |b| {
        b.to_async(&rt)
            .iter(|| local.call("noop_local", json!({}), &session));
    });
    group.finish();
    assert_eq!(
        channel.connections_opened(),
        1,
        "the pooled calls reused one connection"
    );

    let mut cold = c.benchmark_group("ssh_cold");
    cold.sample_size(20)
        .measurement_time(Duration::from_secs(8));
    cold.bench_function("executor_cold_call", |b| {
        b.to_async(&rt).iter(|| async {
            channel.close_idle();
            let r = h.executor.call("noop", json!({}), &session).await;
            assert_eq!(r.status, Status::Completed);
        });
    });
    cold.finish();
    drop(sshd);
}

criterion_group!(benches, ssh);
criterion_main!(benches);
