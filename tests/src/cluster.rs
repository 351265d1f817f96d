//! PostgreSQL servers of a test's own (`initdb`, or `pg_basebackup` of another, in a
//! temporary directory; `pg_ctl`), for the tests that stop, crash or promote a server and
//! so must not share one with other tests. Run as the `postgres` user when the tests run
//! as root (the server refuses to run as root). Each server is stopped (`-m immediate`)
//! and its directory deleted when its [`Cluster`] is dropped, also while a failed test
//! unwinds. `sallyport-postgres`'s crash-stop and failover tests and the crash campaign
//! (`crash-campaign`, whose database restarts must not touch the server other tests share)
//! use it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

/// A PostgreSQL server of the test's own, in a temporary directory.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    /// The TCP port on 127.0.0.1.
    pub port: u16,
}

/// The newest PostgreSQL server binaries on the machine.
fn server_bin() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path().join("bin"))
                .filter(|bin| bin.join("initdb").exists() && bin.join("pg_ctl").exists())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(Path::file_name)
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    match dirs.pop() {
        Some(bin) => bin,
        None => {
            let found = Command::new("sh")
                .args(["-c", "command -v initdb"])
                .output()
                .expect("sh");
            let path = String::from_utf8_lossy(&found.stdout).trim().to_owned();
            assert!(
                !path.is_empty(),
                "this test starts PostgreSQL servers of its own: install the server binaries (initdb, pg_ctl, pg_basebackup)"
            );
            PathBuf::from(path)
                .parent()
                .expect("initdb's directory")
                .to_owned()
        }
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A free TCP port on 127.0.0.1 (another process may take it before the server does; the
/// tests accept that small risk, as the workspace's other servers do).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn assert_ran(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

impl Cluster {
    /// An empty directory for a server named `label`, owned by the user the server runs as,
    /// and a free port; nothing started.
    fn empty(label: &str) -> Self {
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("sallyport-{label}-{}-{stamp}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("cluster dir");
        if is_root() {
            let chowned = Command::new("chown")
                .arg("postgres:")
                .arg(&dir)
                .status()
                .expect("chown");
            assert!(chowned.success(), "chown postgres: {}", dir.display());
        }
        Self {
            bin: server_bin(),
            dir,
            port: free_port(),
        }
    }

    /// `initdb` (trust authentication, replication connections from 127.0.0.1 included),
    /// then `settings` appended to its `postgresql.conf`, then a start on a free port.
    pub fn start(label: &str, settings: &str) -> Self {
        let cluster = Self::empty(label);
        let initdb = cluster
            .as_pg(&cluster.bin.join("initdb"))
            .arg("-D")
            .arg(cluster.data())
            .args([
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--auth=trust",
                "--no-sync",
            ])
            .stdout(Stdio::null())
            .output()
            .expect("initdb");
        assert_ran("initdb", &initdb);
        cluster.append("postgresql.conf", settings);
        cluster.pg_ctl_start();
        cluster
    }

    /// A streaming standby of `primary`: `pg_basebackup -R` (which writes `standby.signal`
    /// and a `primary_conninfo`), then `settings` appended to its `postgresql.auto.conf`
    /// (read last, so they win over the primary's copied `postgresql.conf`), then a start.
    pub fn standby_of(primary: &Cluster, label: &str, settings: &str) -> Self {
        let cluster = Self::empty(label);
        let backup = cluster
            .as_pg(&cluster.bin.join("pg_basebackup"))
            .arg("-D")
            .arg(cluster.data())
            .args([
                "-d",
                &format!("host=127.0.0.1 port={} user=postgres", primary.port),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ])
            .stdout(Stdio::null())
            .output()
            .expect("pg_basebackup");
        assert_ran("pg_basebackup", &backup);
        cluster.append("postgresql.auto.conf", settings);
        cluster.pg_ctl_start();
        cluster
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Appends `settings` to the configuration file `file` of the data directory.
    fn append(&self, file: &str, settings: &str) {
        if settings.is_empty() {
            return;
        }
        let path = self.data().join(file);
        let mut text = std::fs::read_to_string(&path).expect("configuration file");
        text.push('\n');
        text.push_str(settings);
        text.push('\n');
        std::fs::write(&path, text).expect("configuration written");
    }

    fn as_pg(&self, program: &Path) -> Command {
        let mut cmd = if is_root() {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(program);
            cmd
        } else {
            Command::new(program)
        };
        cmd.current_dir(&self.dir);
        cmd
    }

    fn pg_ctl(&self, args: &[&str]) -> Output {
        self.as_pg(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(args)
            .stdout(Stdio::null())
            .output()
            .expect("pg_ctl")
    }

    /// Starts the server (again) on its port, its socket in its directory.
    pub fn pg_ctl_start(&self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories={}",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log");
        let started = self.pg_ctl(&[
            "-l",
            &log.display().to_string(),
            "-w",
            "-t",
            "60",
            "start",
            "-o",
            &options,
        ]);
        assert!(
            started.status.success(),
            "pg_ctl start: {}\n{}",
            String::from_utf8_lossy(&started.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// `pg_ctl stop -m immediate`: every server process quits at once, without a checkpoint.
    pub fn crash(&self) {
        let stopped = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        assert_ran("pg_ctl stop -m immediate", &stopped);
    }

    /// `pg_ctl promote`: a standby leaves recovery and takes writes; returns when it does.
    pub fn promote(&self) {
        let promoted = self.pg_ctl(&["-w", "-t", "60", "promote"]);
        assert_ran("pg_ctl promote", &promoted);
    }

    /// The server's log so far (for a failure's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// A connection string to this server alone.
    pub fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.data().join("postmaster.pid").exists() {
            let _ = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
