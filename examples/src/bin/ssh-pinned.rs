//! An SSH action on a host with a pinned key.
//!
//! Start a throwaway sshd on loopback (as root; keys under /tmp):
//!
//! ```text
//! mkdir -p /tmp/sp-sshd /run/sshd
//! ssh-keygen -q -t ed25519 -N '' -f /tmp/sp-sshd/host_key
//! ssh-keygen -q -t ed25519 -N '' -f /tmp/sp-sshd/client_key
//! cp /tmp/sp-sshd/client_key.pub /tmp/sp-sshd/authorized_keys
//! /usr/sbin/sshd -p 2222 -h /tmp/sp-sshd/host_key -o ListenAddress=127.0.0.1 \
//!     -o AuthorizedKeysFile=/tmp/sp-sshd/authorized_keys -o UsePAM=no -o StrictModes=no \
//!     -o PermitRootLogin=prohibit-password -o PidFile=/tmp/sp-sshd/pid
//! ```
//!
//! then run
//!
//! ```text
//! cargo run --bin ssh-pinned -- 127.0.0.1 2222 root /tmp/sp-sshd/client_key "$(cat /tmp/sp-sshd/host_key.pub)"
//! kill "$(cat /tmp/sp-sshd/pid)"
//! ```
//!
//! The agent picks a path from a closed list; it never supplies a host, a user or a command
//! string. An argument that tries to smuggle in shell syntax is refused by the schema, and a
//! host key other than the pinned one refuses the connection before authentication.

use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_ssh::{Host, Inventory, SshChannel};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Report free disk space for one of the host's well-known paths.
#[derive(Debug, Action, Deserialize, JsonSchema)]
#[action(name = "disk_usage", effect = observe, credential = "local-ssh")]
#[ssh(host = "local", argv = ["df", "-P", "{path}"])]
#[serde(deny_unknown_fields)]
struct DiskUsage {
    /// The path to report on.
    #[schemars(regex(pattern = r"^(/|/tmp|/var)$"))]
    path: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [address, port, user, key_file, host_key] = args.as_slice() else {
        eprintln!("usage: ssh-pinned ADDRESS PORT USER PRIVATE_KEY_FILE 'HOST_KEY_LINE'");
        eprintln!("(the file's doc comment shows how to start a throwaway sshd)");
        std::process::exit(2);
    };
    let inventory = Inventory::builder()
        .host(
            Host::new("local", address.as_str(), user.as_str(), "local-ssh")
                .with_port(port.parse()?)
                .with_host_key(host_key.as_str()),
        )
        .build()?;
    let vault = MemoryVault::new();
    vault.set(
        CredentialMeta::new(
            "local-ssh",
            CredentialKind::SshKey,
            Binding::ssh("local", user.as_str()),
        ),
        Secret::new(std::fs::read_to_string(key_file)?),
    );
    let dir = std::env::temp_dir().join(format!("sallyport-ssh-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let executor = Executor::builder(Catalog::builder().action::<DiskUsage>().build()?)
        .journal(SqliteJournal::open(dir.join("journal.db"))?)
        .vault(vault)
        .channel(SshChannel::new(inventory))
        .build()?;
    let session = Session::new("ops-agent");

    for args in [json!({"path": "/tmp"}), json!({"path": "/tmp; rm -rf /"})] {
        println!("agent asks: disk_usage {args}");
        let result = executor.call("disk_usage", args, &session).await;
        println!("{}\n", serde_json::to_string_pretty(&result)?);
    }
    println!("journal: {}", dir.join("journal.db").display());
    Ok(())
}
