//! A real OpenSSH `sshd` for tests: started on a free loopback port with its own throwaway
//! host key, client key and authorized_keys, stopped (with every process it forked) on drop.
//!
//! There is no silent skip: when `sshd` is missing the harness panics with a message saying to
//! install `openssh-server`.

use std::fmt::Write as _;
use std::io::Read as _;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The throwaway user the password-authentication tests log in as (created if absent).
pub const PASSWORD_USER: &str = "sallyport-sshtest";

/// A running `sshd` and its throwaway keys.
#[derive(Debug)]
pub struct Sshd {
    dir: TempDir,
    port: u16,
    child: Option<Child>,
    starts: u32,
    /// Whether the server trusts the throwaway user CA ([`Sshd::start_trusting_user_ca`]).
    user_ca: bool,
}

/// Where the OpenSSH server binary is, or a panic telling the reader to install it.
pub fn sshd_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SALLYPORT_SSHD") {
        return PathBuf::from(path);
    }
    let mut candidates = vec![
        PathBuf::from("/usr/sbin/sshd"),
        PathBuf::from("/usr/local/sbin/sshd"),
    ];
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|p| p.join("sshd")));
    }
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "OpenSSH sshd was not found (looked in /usr/sbin, /usr/local/sbin and PATH; \
                 set SALLYPORT_SSHD to override). The SSH tests need a real sshd: install \
                 openssh-server (e.g. `apt-get install -y openssh-server`)."
            )
        })
}

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn keygen(path: &Path, passphrase: &str) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(path.with_extension("pub"));
    run(Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            passphrase,
            "-C",
            "sallyport-test",
            "-f",
        ])
        .arg(path));
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
    listener.local_addr().expect("local address").port()
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("read /dev/urandom");
    buf.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

impl Sshd {
    /// Starts an sshd on a free loopback port. Root may log in with the client key
    /// ([`Sshd::client_key`]); [`PASSWORD_USER`] may log in with [`password_user`]'s password.
    ///
    /// # Panics
    ///
    /// When sshd is missing (install openssh-server), when the process is not root (the tests
    /// log in as root and create a throwaway user), or when sshd does not start.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// Starts an sshd like [`Sshd::start`] that also trusts a throwaway OpenSSH user CA
    /// (`TrustedUserCAKeys`; its private key is [`Sshd::user_ca_key`]) and takes a user's
    /// allowed certificate principals from `principals/<user>` in its directory
    /// (`AuthorizedPrincipalsFile`; root's lists `root`, [`Sshd::set_principals`] changes
    /// it). Key and password logins work as with [`Sshd::start`].
    ///
    /// # Panics
    ///
    /// As [`Sshd::start`].
    pub fn start_trusting_user_ca() -> Self {
        Self::start_with(true)
    }

    fn start_with(user_ca: bool) -> Self {
        let binary = sshd_binary();
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        assert_eq!(
            uid, "0",
            "the SSH tests run as root: they log in as root to a throwaway sshd and create a \
             throwaway password user"
        );
        let dir = tempfile::Builder::new()
            .prefix("sallyport-sshd-")
            .tempdir()
            .expect("tempdir");
        keygen(&dir.path().join("host_key"), "");
        keygen(&dir.path().join("client_key"), "");
        keygen(&dir.path().join("other_key"), "");
        std::fs::copy(
            dir.path().join("client_key.pub"),
            dir.path().join("authorized_keys"),
        )
        .expect("write authorized_keys");
        if user_ca {
            keygen(&dir.path().join("user_ca"), "");
            keygen(&dir.path().join("other_ca"), "");
            std::fs::create_dir_all(dir.path().join("principals")).expect("principals dir");
            std::fs::write(dir.path().join("principals/root"), "root\n")
                .expect("write root's principals");
        }
        // The privilege-separation directory sshd insists on.
        let _ = std::fs::create_dir_all("/run/sshd");
        let mut sshd = Self {
            dir,
            port: free_port(),
            child: None,
            starts: 0,
            user_ca,
        };
        sshd.write_config();
        sshd.launch(&binary);
        sshd
    }

    fn write_config(&self) {
        let d = self.dir.path().display();
        let mut config = format!(
            "Port {port}\n\
             ListenAddress 127.0.0.1\n\
             HostKey {d}/host_key\n\
             PidFile none\n\
             AuthorizedKeysFile {d}/authorized_keys\n\
             UsePAM no\n\
             StrictModes no\n\
             PermitRootLogin prohibit-password\n\
             PubkeyAuthentication yes\n\
             PasswordAuthentication yes\n\
             KbdInteractiveAuthentication no\n\
             PermitEmptyPasswords no\n\
             AllowAgentForwarding yes\n\
             AllowTcpForwarding yes\n\
             X11Forwarding no\n\
             PermitUserEnvironment no\n\
             SetEnv SHLVL=1\n\
             MaxSessions 64\n\
             MaxStartups 64\n\
             LogLevel VERBOSE\n",
            port = self.port
        );
        if self.user_ca {
            // A user without a principals file cannot log in with a certificate.
            let _ = write!(
                config,
                "TrustedUserCAKeys {d}/user_ca.pub\n\
                 AuthorizedPrincipalsFile {d}/principals/%u\n"
            );
        }
        std::fs::write(self.dir.path().join("sshd_config"), config).expect("write sshd_config");
    }

    fn launch(&mut self, binary: &Path) {
        self.starts += 1;
        let log = self.dir.path().join(format!("sshd-{}.log", self.starts));
        let child = Command::new(binary)
            .arg("-D")
            .arg("-f")
            .arg(self.dir.path().join("sshd_config"))
            .arg("-E")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {}: {e}", binary.display()));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                let mut stderr = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut stderr);
                }
                panic!(
                    "sshd exited at start ({status}): {stderr}{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut banner = [0u8; 4];
                if stream.read_exact(&mut banner).is_ok() && &banner == b"SSH-" {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "sshd did not accept connections on 127.0.0.1:{} within 10 s: {}",
                self.port,
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's host public key line (`ssh-ed25519 AAAA… sallyport-test`).
    pub fn host_public_key(&self) -> String {
        read(&self.dir.path().join("host_key.pub"))
    }

    /// The private key (OpenSSH format) root is authorized with.
    pub fn client_key(&self) -> String {
        read(&self.dir.path().join("client_key"))
    }

    /// A well-formed private key the server does not authorize.
    pub fn unauthorized_key(&self) -> String {
        read(&self.dir.path().join("other_key"))
    }

    /// A fresh key pair's public line, never used by this server (for "unknown host key").
    pub fn unrelated_public_key(&self) -> String {
        let path = self.dir.path().join("unrelated_key");
        keygen(&path, "");
        read(&path.with_extension("pub"))
    }

    /// The private key (OpenSSH format) of the user CA the server trusts (an sshd of
    /// [`Sshd::start_trusting_user_ca`]).
    pub fn user_ca_key(&self) -> String {
        read(&self.dir.path().join("user_ca"))
    }

    /// Where the user CA's private key lies on the server's machine (for a test whose remote
    /// command prints it back, as a hostile host could).
    pub fn user_ca_key_path(&self) -> PathBuf {
        self.dir.path().join("user_ca")
    }

    /// The private key of a well-formed user CA the server does not trust.
    pub fn untrusted_user_ca_key(&self) -> String {
        read(&self.dir.path().join("other_ca"))
    }

    /// A copy of the user CA's private key protected by `passphrase` (the server trusts it:
    /// the key is the same).
    pub fn user_ca_key_with_passphrase(&self, passphrase: &str) -> String {
        let path = self.dir.path().join("user_ca_encrypted");
        std::fs::copy(self.dir.path().join("user_ca"), &path).expect("copy the CA key");
        run(Command::new("ssh-keygen")
            .args(["-q", "-p", "-P", "", "-N", passphrase, "-f"])
            .arg(&path));
        read(&path)
    }

    /// The certificate principals `user` may log in with (sshd reads the file at each
    /// login; no restart).
    pub fn set_principals(&self, user: &str, principals: &[&str]) {
        let mut text = principals.join("\n");
        text.push('\n');
        std::fs::write(self.dir.path().join("principals").join(user), text)
            .expect("write the principals file");
    }

    /// Logins the current server instance accepted with a user certificate
    /// ("Accepted publickey … ED25519-CERT …").
    pub fn accepted_certificate_logins(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| l.contains("Accepted publickey for ") && l.contains("-CERT "))
            .count()
    }

    /// Writes a private key protected by `passphrase`, authorizes it, and returns it.
    pub fn authorize_encrypted_key(&self, passphrase: &str) -> String {
        let path = self.dir.path().join("encrypted_key");
        keygen(&path, passphrase);
        let mut authorized = read(&self.dir.path().join("authorized_keys"));
        authorized.push_str(&read(&path.with_extension("pub")));
        std::fs::write(self.dir.path().join("authorized_keys"), authorized)
            .expect("write authorized_keys");
        read(&path)
    }

    /// Commands the server started for `user` in the current instance's log (one per exec
    /// request it accepted, whatever the command).
    pub fn commands_started_for(&self, user: &str) -> usize {
        self.log()
            .matches(&format!("Starting session: command for {user} from "))
            .count()
    }

    /// Successful logins in the current server instance's log ("Accepted publickey …",
    /// "Accepted password …").
    pub fn accepted_logins(&self) -> usize {
        let log = self.dir.path().join(format!("sshd-{}.log", self.starts));
        let log = read(&log);
        log.matches("Accepted publickey for ").count()
            + log.matches("Accepted password for ").count()
    }

    /// The current server instance's log.
    pub fn log(&self) -> String {
        read(&self.dir.path().join(format!("sshd-{}.log", self.starts)))
    }

    /// The command names of every process the server forked (its per-connection processes
    /// and the commands they run).
    pub fn process_names(&self) -> Vec<String> {
        let Some(child) = &self.child else {
            return Vec::new();
        };
        descendants(child.id())
            .into_iter()
            .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).ok())
            .map(|name| name.trim().to_owned())
            .collect()
    }

    /// Waits until a process named `name` runs below the server (a command was started).
    pub fn wait_for_process(&self, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.process_names().iter().any(|n| n == name) {
            assert!(
                Instant::now() < deadline,
                "no `{name}` process started under sshd within 10 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills every process the server forked (connections and the commands they run), leaving
    /// the listener up: each client sees its connection drop without an exit status.
    pub fn kill_sessions(&self) {
        if let Some(child) = &self.child {
            kill(&descendants(child.id()));
        }
    }

    /// Stops the server and every process it forked.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let mut pids = descendants(child.id());
            pids.push(child.id());
            kill(&pids);
            let _ = child.wait();
        }
    }

    /// Stops and starts the server on the same port with the same keys.
    pub fn restart(&mut self) {
        self.stop();
        self.launch(&sshd_binary());
    }

    /// Replaces the host key with a new one and restarts (a changed host key).
    pub fn rotate_host_key(&mut self) {
        self.stop();
        keygen(&self.dir.path().join("host_key"), "");
        self.launch(&sshd_binary());
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Every process below `root` (children, grandchildren, …), from /proc.
fn descendants(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid …`; comm may contain spaces and parentheses.
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
                parents.push((pid, ppid));
            }
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid) in &parents {
            if ppid == parent && !found.contains(&pid) {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

fn kill(pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg("-KILL")
        .args(pids.iter().map(u32::to_string))
        .stderr(Stdio::null())
        .status();
}

/// Creates [`PASSWORD_USER`] if absent and gives it a fresh random password (once per
/// process). Needs root; the user is a throwaway with no home directory.
pub fn password_user() -> &'static str {
    static PASSWORD: OnceLock<String> = OnceLock::new();
    PASSWORD.get_or_init(|| {
        let exists = Command::new("id")
            .arg(PASSWORD_USER)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !exists {
            run(Command::new("useradd").args(["-M", "-s", "/bin/sh", PASSWORD_USER]));
        }
        let password = format!("pw-{}", random_hex(12));
        let mut child = Command::new("chpasswd")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run chpasswd (the password tests need root)");
        {
            use std::io::Write as _;
            let mut stdin = child.stdin.take().expect("chpasswd stdin");
            writeln!(stdin, "{PASSWORD_USER}:{password}").expect("write to chpasswd");
        }
        let out = child.wait_with_output().expect("wait for chpasswd");
        assert!(
            out.status.success(),
            "chpasswd failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        password
    })
}

/// The throwaway user whose login shell is fish (created if absent), for the tests of a
/// non-POSIX login shell.
pub const FISH_USER: &str = "sallyport-fish";

/// Where the fish shell must be installed.
pub const FISH_SHELL: &str = "/usr/bin/fish";

/// Creates [`FISH_USER`] with [`FISH_SHELL`] as its login shell if absent (once per process).
/// The server's authorized_keys file is shared by every user, so [`Sshd::client_key`] logs
/// in as this user too. Needs root; the user has no home directory and no password (`*`, so
/// the account is not locked for key logins).
///
/// # Panics
///
/// When fish is not installed (install the Debian package `fish`), or useradd fails.
pub fn fish_user() -> &'static str {
    static CREATED: OnceLock<()> = OnceLock::new();
    CREATED.get_or_init(|| {
        assert!(
            Path::new(FISH_SHELL).is_file(),
            "{FISH_SHELL} was not found. The non-POSIX login shell tests need a real fish: \
             install it (e.g. `apt-get install -y fish`)."
        );
        let exists = Command::new("id")
            .arg(FISH_USER)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !exists {
            let out = Command::new("useradd")
                .args(["-M", "-s", FISH_SHELL, "-p", "*", FISH_USER])
                .output()
                .expect("run useradd (the fish tests need root)");
            // Exit 9: another test process created it in the meantime.
            assert!(
                out.status.success() || out.status.code() == Some(9),
                "useradd {FISH_USER} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        run(Command::new("usermod").args(["-s", FISH_SHELL, FISH_USER]));
    });
    FISH_USER
}

/// Executor fixtures for SSH tests: an inventory, a vault and an executor wired to an [`Sshd`].
pub mod fixture {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;
    use sallyport_core::consent::{ConsentDecision, ConsentProvider, ConsentRequest};
    use sallyport_core::journal::SqliteJournal;
    use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
    use sallyport_core::{Catalog, Executor};
    use sallyport_ssh::{Host, Inventory, SshChannel};
    use tempfile::TempDir;

    use super::{PASSWORD_USER, Sshd};

    /// The inventory name of the key-authenticated host (root).
    pub const KEY_HOST: &str = "web1";
    /// The vault credential bound to root@web1.
    pub const KEY_CREDENTIAL: &str = "web1-root-key";
    /// The inventory name of the password-authenticated host ([`PASSWORD_USER`]).
    pub const PASSWORD_HOST: &str = "web1-pw";
    /// The vault credential bound to the password user on `web1-pw`.
    pub const PASSWORD_CREDENTIAL: &str = "web1-password";

    /// `web1` (root, key) and `web1-pw` (the password user), both pinned to the server's
    /// host key.
    pub fn inventory(sshd: &Sshd) -> Inventory {
        inventory_pinned(sshd, &sshd.host_public_key())
    }

    /// The same inventory with `pin` as both hosts' host key pin.
    pub fn inventory_pinned(sshd: &Sshd, pin: &str) -> Inventory {
        Inventory::builder()
            .host(
                Host::new(KEY_HOST, "127.0.0.1", "root", KEY_CREDENTIAL)
                    .with_port(sshd.port())
                    .with_host_key(pin),
            )
            .host(
                Host::new(
                    PASSWORD_HOST,
                    "127.0.0.1",
                    PASSWORD_USER,
                    PASSWORD_CREDENTIAL,
                )
                .with_port(sshd.port())
                .with_host_key(pin),
            )
            .build()
            .expect("inventory")
    }

    /// The inventory name of the host whose user has fish as login shell.
    pub const FISH_HOST: &str = "web1-fish";
    /// The vault credential bound to the fish user on `web1-fish`.
    pub const FISH_CREDENTIAL: &str = "web1-fish-key";

    /// [`inventory`] plus `web1-fish`, where commands run as [`super::FISH_USER`].
    pub fn inventory_with_fish(sshd: &Sshd) -> Inventory {
        let pin = sshd.host_public_key();
        Inventory::builder()
            .host(
                Host::new(KEY_HOST, "127.0.0.1", "root", KEY_CREDENTIAL)
                    .with_port(sshd.port())
                    .with_host_key(&pin),
            )
            .host(
                Host::new(FISH_HOST, "127.0.0.1", super::FISH_USER, FISH_CREDENTIAL)
                    .with_port(sshd.port())
                    .with_host_key(&pin),
            )
            .build()
            .expect("inventory")
    }

    /// Adds `key` as the fish user's key on `web1-fish`.
    pub fn add_fish_key(vault: &MemoryVault, key: &str) {
        vault.set(
            CredentialMeta::new(
                FISH_CREDENTIAL,
                CredentialKind::SshKey,
                Binding::ssh(FISH_HOST, super::FISH_USER),
            ),
            Secret::new(key),
        );
    }

    /// A vault holding `key` as root@web1's key.
    pub fn vault_with_key(key: &str) -> MemoryVault {
        let vault = MemoryVault::new();
        vault.set(
            CredentialMeta::new(
                KEY_CREDENTIAL,
                CredentialKind::SshKey,
                Binding::ssh(KEY_HOST, "root"),
            ),
            Secret::new(key),
        );
        vault
    }

    /// Adds the password credential for the password user on `web1-pw`.
    pub fn add_password(vault: &MemoryVault, password: &str) {
        vault.set(
            CredentialMeta::new(
                PASSWORD_CREDENTIAL,
                CredentialKind::SshPassword,
                Binding::ssh(PASSWORD_HOST, PASSWORD_USER),
            ),
            Secret::new(password),
        );
    }

    /// Approves every call and counts how often a human was asked.
    #[derive(Clone, Debug, Default)]
    pub struct CountingConsent {
        /// Consent requests so far.
        pub asks: Arc<AtomicUsize>,
        /// The consent prompts' request lines, in order.
        pub requests: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl CountingConsent {
        /// How many times a human was asked.
        pub fn asks(&self) -> usize {
            self.asks.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl ConsentProvider for CountingConsent {
        async fn ask(&self, request: &ConsentRequest) -> ConsentDecision {
            self.asks.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut requests) = self.requests.lock() {
                requests.push(request.request.clone());
            }
            ConsentDecision::Approve
        }
    }

    /// An executor with a real SQLite journal in a temporary directory.
    #[derive(Debug)]
    pub struct Harness {
        /// The executor.
        pub executor: Executor,
        /// The SSH channel (shared with the executor).
        pub channel: SshChannel,
        /// The vault (shared with the executor).
        pub vault: Arc<MemoryVault>,
        /// The consent provider (shared with the executor).
        pub consent: CountingConsent,
        /// Holds the journal file.
        pub dir: TempDir,
    }

    /// An executor over `catalog`, `channel` and `vault`.
    pub fn harness(catalog: Catalog, channel: SshChannel, vault: MemoryVault) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = SqliteJournal::open(dir.path().join("journal.db")).expect("journal");
        let vault = Arc::new(vault);
        let consent = CountingConsent::default();
        let executor = Executor::builder(catalog)
            .journal(journal)
            .vault_arc(vault.clone())
            .consent(consent.clone())
            .channel(channel.clone())
            .build()
            .expect("executor");
        Harness {
            executor,
            channel,
            vault,
            consent,
            dir,
        }
    }
}
