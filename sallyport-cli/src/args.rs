//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  failure not covered below (I/O, keychain backend)
  2  bad arguments
  3  the vault is locked (lock marker present)
  4  wrong passphrase
  5  no such credential or approval, or no vault / journal at the path
  6  the credential or the vault file already exists
  7  the vault, journal or proof file is damaged, truncated, foreign or newer (left
     untouched)
  8  audit verify found a broken chain (or, with --public-key, records no signed head or
     checkpoint covers, or a checkpoint that does not match); audit checkpoint / prove: the
     chain is broken or no longer matches its checkpoint
  9  approvals approve/deny: the approval was already decided (or is being carried out, or
     finished); nothing changed
 10  approvals approve/deny: the approval expired before anyone decided; nothing is sent
 11  reconcile: an abandoned attempt is still unknown (its check could not tell); it stays
     unresolved and nothing was resent
 12  scaffold: none of the operations could be generated (each is listed with the reason)
 13  approvals verify: a decision's signature does not verify (or is missing, or by another
     key than --public-key)
 14  approvals approve/deny: the decision was refused (by the decision policy, or the
     approver requested the call); the refusal is audited and nothing changed;
     approvals approve --remember: the approval cannot be remembered (an
     irreversible_or_broad action, a quorum, a window out of range); nothing was decided
 15  vault grants disconnect: the provider did not revoke the grant (down, slow, refusing);
     the grant was NOT removed (retry, or --force to remove it anyway)
 16  credentials connect: the provider or the user refused the authorization, or the
     provider refused the code; nothing was stored
 17  credentials connect: the redirect's state did not match this connect (not its
     redirect, or forged); nothing was exchanged or stored
 18  credentials connect: no redirect came back within --timeout; nothing was stored
 19  audit check-proof: the proof does not verify (an edited, reordered or deleted record,
     a changed path or tree size, a forged checkpoint, or another key)
 20  audit prove: no signed checkpoint covers the record yet (run audit checkpoint)

DATA_DIR is $XDG_DATA_HOME (or ~/.local/share) on Linux, ~/Library/Application Support on
macOS and %APPDATA% on Windows.

Secrets and passphrases are read from a no-echo prompt on a terminal, or one line each from
standard input when it is not a terminal (in the order the prompts would ask). They are never
taken from arguments or environment variables, and no command prints one.";

/// Put credentials into a sallyport vault without exposing them to agents, and check the
/// audit log.
///
/// The options on where credentials and the journal are kept (`--vault`, `--keychain`,
/// `--keychain-service`, `--passphrase-file`, `--journal`) are taken before the command's
/// name or anywhere after it, by every command but `scaffold`, which reads neither and does
/// not list them.
#[derive(Debug, Parser)]
#[command(name = "sallyport", version, after_long_help = EXIT_CODES, after_help = "Exit codes: see --help.")]
#[non_exhaustive]
pub struct Cli {
    /// The encrypted vault file [default: DATA_DIR/sallyport/vault.spv].
    #[arg(long, env = "SALLYPORT_VAULT", value_name = "PATH")]
    pub vault: Option<PathBuf>,

    /// Use the OS keychain instead of the vault file.
    #[arg(long, value_name = "BACKEND")]
    pub keychain: Option<KeychainArg>,

    /// The keychain service name the credentials are stored under.
    #[arg(long, default_value = "sallyport", value_name = "NAME")]
    pub keychain_service: String,

    /// Read the vault passphrase from the first line of this file (keep it mode 0600) instead
    /// of prompting.
    #[arg(long, value_name = "PATH")]
    pub passphrase_file: Option<PathBuf>,

    /// The journal for `audit`, `approvals` and `policy` commands: a SQLite file, or a PostgreSQL
    /// database as a `postgres://` / `postgresql://` URL [default:
    /// DATA_DIR/sallyport/journal.db]. An application that embeds these commands with its
    /// executor uses the executor's journal for `approvals` instead.
    #[arg(
        long,
        env = "SALLYPORT_JOURNAL",
        hide_env_values = true,
        value_name = "PATH|URL"
    )]
    pub journal: Option<JournalLocation>,

    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The ids of the options on where credentials and the journal are kept.
const STORE_OPTIONS: [&str; 5] = [
    "vault",
    "keychain",
    "keychain_service",
    "passphrase_file",
    "journal",
];

/// The commands that keep nothing in a vault or a journal, so take none of the
/// [`STORE_OPTIONS`].
const STORELESS_COMMANDS: [&str; 1] = ["scaffold"];

impl Cli {
    /// The command line: the store options are the top level's (before a command's name), and
    /// global options of each command that uses them, so they are taken after its name too
    /// (`sallyport vault list --vault PATH`) and listed in its help; `scaffold` neither takes
    /// nor lists them.
    fn command_line() -> clap::Command {
        let mut top = <Self as clap::CommandFactory>::command();
        let options: Vec<clap::Arg> = top
            .get_arguments()
            .filter(|a| STORE_OPTIONS.contains(&a.get_id().as_str()))
            .cloned()
            .collect();
        let commands: Vec<String> = top
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .filter(|name| !STORELESS_COMMANDS.contains(&name.as_str()))
            .collect();
        for name in commands {
            top = top.mut_subcommand(name, |mut command| {
                for option in &options {
                    command = command.arg(option.clone().global(true));
                }
                command
            });
        }
        top
    }

    /// Parses the command line (the first item is the program name): a store option given
    /// after the command's name wins over the same option before it.
    ///
    /// # Errors
    ///
    /// clap's error for arguments it does not accept (or its help and version text).
    pub(crate) fn parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::FromArgMatches as _;
        use clap::parser::ValueSource;

        let mut command = Self::command_line();
        let matches = command.try_get_matches_from_mut(args)?;
        let mut cli = Self::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
        let Some((_, sub)) = matches.subcommand() else {
            return Ok(cli);
        };
        let given = |id: &str| {
            sub.try_get_raw(id).ok().flatten().is_some()
                && sub.value_source(id) == Some(ValueSource::CommandLine)
        };
        if given("vault") {
            cli.vault = sub.get_one::<PathBuf>("vault").cloned();
        }
        if given("keychain") {
            cli.keychain = sub.get_one::<KeychainArg>("keychain").copied();
        }
        if given("keychain_service")
            && let Some(service) = sub.get_one::<String>("keychain_service")
        {
            cli.keychain_service.clone_from(service);
        }
        if given("passphrase_file") {
            cli.passphrase_file = sub.get_one::<PathBuf>("passphrase_file").cloned();
        }
        if given("journal") {
            cli.journal = sub.get_one::<JournalLocation>("journal").cloned();
        }
        Ok(cli)
    }
}

/// Where `--journal` points: a SQLite file or a PostgreSQL database.
///
/// Its `Debug` never shows a URL's password (nor its query, which may carry one).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JournalLocation {
    /// A SQLite journal file.
    File(PathBuf),
    /// A PostgreSQL connection URL (`postgres://…` or `postgresql://…`).
    Postgres(String),
}

impl JournalLocation {
    /// The URL schemes that name a PostgreSQL journal.
    pub const POSTGRES_SCHEMES: [&'static str; 2] = ["postgres://", "postgresql://"];
}

impl From<std::ffi::OsString> for JournalLocation {
    fn from(value: std::ffi::OsString) -> Self {
        match value.to_str() {
            Some(url)
                if Self::POSTGRES_SCHEMES.iter().any(|scheme| {
                    url.get(..scheme.len())
                        .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
                }) =>
            {
                Self::Postgres(url.to_owned())
            }
            _ => Self::File(PathBuf::from(value)),
        }
    }
}

impl From<PathBuf> for JournalLocation {
    fn from(path: PathBuf) -> Self {
        Self::from(path.into_os_string())
    }
}

impl std::fmt::Debug for JournalLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
            Self::Postgres(url) => f.debug_tuple("Postgres").field(&redacted_url(url)).finish(),
        }
    }
}

/// `url` without its user information and query: `postgres://***@host:port/db?***`.
pub(crate) fn redacted_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (rest, query) = match rest.split_once('?') {
        Some((rest, _)) => (rest, "?***"),
        None => (rest, ""),
    };
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    // The last `@` ends the user information (a password may itself hold an `@`).
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let user = if authority.contains('@') { "***@" } else { "" };
    let slash = if rest.contains('/') { "/" } else { "" };
    format!("{scheme}://{user}{host}{slash}{path}{query}")
}

/// An OS keychain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[non_exhaustive]
pub enum KeychainArg {
    /// The platform's usual keychain.
    Auto,
    /// Linux kernel keyutils (session keyring).
    Keyutils,
    /// The freedesktop Secret Service (GNOME Keyring, KWallet).
    SecretService,
    /// The macOS Keychain.
    Macos,
    /// The Windows Credential Manager.
    Windows,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum Command {
    /// Manage credentials: init, set, list, remove, rotate, lock, unlock, status, grants.
    #[command(subcommand)]
    Vault(VaultCommand),
    /// Connect an OAuth account (a browser login with a loopback redirect), list the
    /// connected accounts, disconnect one.
    #[command(subcommand)]
    Credentials(CredentialsCommand),
    /// Check and export the audit log: verify, export, unresolved, keygen, checkpoint, prove,
    /// check-proof.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Decide calls parked for a human's approval: list, show, approve (and remember), deny,
    /// resume; list and revoke remembered approvals.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Report on the host's policy from the audit log: shadow-report (what a candidate
    /// policy run in shadow would have changed).
    #[command(subcommand)]
    Policy(crate::policy::PolicyCommand),
    /// Settle attempts a crashed executor left unresolved, through each action's read-only
    /// reconcile action; never resends. Needs the application's actions: works in an
    /// application's own command line (`sallyport_cli::run_with_executor`); the plain
    /// `sallyport` binary refuses it (exit 2). Exit 11 when an attempt is still unknown.
    Reconcile {
        /// Print the report as JSON (non-ASCII written as \u escapes).
        #[arg(long)]
        json: bool,
        /// Treat an attempt without lease information (SQLite) as abandoned once it is this
        /// old; a live executor's call in flight is unresolved too [default: 60].
        #[arg(long, value_name = "SECS")]
        min_age: Option<u64>,
    },
    /// Serve the web console for approvals and the audit trail (the plain binary records
    /// decisions only; see `console --help`).
    Console(crate::console::ConsoleArgs),
    /// Write a Rust module of actions from operations of an OpenAPI 3.0/3.1 document (JSON
    /// or YAML). Effect, consent and retry are left as `choose` for you to decide (it does not
    /// compile until you do). Operations it cannot express are listed with the reason; exit 12
    /// when none could be generated.
    Scaffold(crate::scaffold::ScaffoldArgs),
}

/// `sallyport vault …`
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum VaultCommand {
    /// Create a new, empty vault file (asks for a new passphrase twice).
    Init(InitArgs),
    /// Store a credential (asks for its value; refuses an existing name unless --replace).
    Set(SetArgs),
    /// Show names, kinds, versions and bindings. Never values.
    List(ListArgs),
    /// Remove a credential.
    Remove {
        /// The credential name.
        name: String,
    },
    /// Replace a credential's value, keeping kind and binding (asks for the new value).
    Rotate {
        /// The credential name.
        name: String,
        /// Also ask for a new SSH key passphrase.
        #[arg(long)]
        key_passphrase: bool,
    },
    /// Lock the vault for every process using it (writes the lock marker; no passphrase needed).
    Lock,
    /// Check the passphrase and remove the lock marker.
    Unlock,
    /// Show the vault's state without the passphrase (exit 3 when locked).
    Status(ListArgs),
    /// The OAuth grants users connected: list them (never a token), or disconnect one. The
    /// vault file's own grants, or with SALLYPORT_GRANTS_POSTGRES set to a connection
    /// string, those a fleet keeps in PostgreSQL (the store's key read from the vault's
    /// credential `grants-key`, or the one SALLYPORT_GRANTS_KEY names).
    #[command(subcommand)]
    Grants(GrantsCommand),
}

/// `sallyport vault grants …`
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum GrantsCommand {
    /// Show each grant's credential, subject, scopes, expiry and state (connected, active,
    /// expired, needs reconnecting). Never a token.
    List(GrantsListArgs),
    /// Revoke a grant at the provider (RFC 7009, at the credential's revocation endpoint)
    /// and remove it from the vault. When the provider does not revoke it (down, slow,
    /// refusing) the grant is kept and the command exits 15, unless --force. A credential
    /// without a revocation endpoint has its grant removed here only, and says so.
    Disconnect(DisconnectArgs),
}

/// `sallyport credentials …`
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum CredentialsCommand {
    /// Connect an account of an OAuth credential (kind oauth_refresh with an authorization
    /// endpoint): prints the provider's authorization URL (and opens it in a browser unless
    /// --no-browser), waits on 127.0.0.1 for the browser's redirect, exchanges the code
    /// (PKCE S256) and stores the grant. Prints credential, subject, scopes and expiry, never
    /// a token. Exit 16 when refused, 17 when the redirect's state does not match, 18 when no
    /// redirect came within --timeout. The grant is stored where `vault grants` reads them:
    /// the vault file's own grants, or the PostgreSQL grant store SALLYPORT_GRANTS_POSTGRES
    /// names.
    Connect(ConnectArgs),
    /// The same commands as `vault grants`.
    #[command(flatten)]
    Grants(GrantsCommand),
}

/// `credentials connect` options.
#[derive(Debug, Args)]
#[non_exhaustive]
pub struct ConnectArgs {
    /// The OAuth credential.
    pub name: String,
    /// The end user whose account is connected (for a credential held for each subject;
    /// without it, the credential's shared grant).
    #[arg(long, value_name = "SUBJECT")]
    pub subject: Option<String>,
    /// The loopback port the redirect comes back to (the redirect URI is
    /// http://127.0.0.1:PORT/callback) [default: a free port].
    #[arg(long, value_name = "PORT", default_value_t = 0)]
    pub port: u16,
    /// Print the URL only; do not try to open a browser.
    #[arg(long)]
    pub no_browser: bool,
    /// How long to wait for the redirect, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub timeout: u64,
}

/// `vault grants list` options.
#[derive(Debug, Args)]
#[non_exhaustive]
pub struct GrantsListArgs {
    /// Only the grants of this credential.
    #[arg(long, value_name = "NAME")]
    pub credential: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `vault grants disconnect` options.
#[derive(Debug, Args)]
#[non_exhaustive]
pub struct DisconnectArgs {
    /// The OAuth credential.
    pub name: String,
    /// The end user whose grant is disconnected (for a credential held for each subject;
    /// without it, the credential's shared grant).
    #[arg(long, value_name = "SUBJECT")]
    pub subject: Option<String>,
    /// Remove the grant even when the provider does not revoke it; its tokens may then stay
    /// valid at the provider until they expire.
    #[arg(long)]
    pub force: bool,
}

/// `vault init` options.
#[derive(Debug, Args)]
#[non_exhaustive]
pub struct InitArgs {
    /// Argon2id memory in MiB.
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub kdf_memory_mib: u32,
    /// Argon2id passes.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub kdf_iterations: u32,
    /// Argon2id lanes.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub kdf_parallelism: u32,
}

/// `vault set` options.
#[derive(Debug, Args)]
#[non_exhaustive]
pub struct SetArgs {
    /// The credential name actions bind to (A-Z a-z 0-9 . _ -).
    pub name: String,
    /// The credential kind.
    #[arg(long, value_enum)]
    pub kind: KindArg,
    /// The user name (basic).
    #[arg(long, value_name = "USER", required_if_eq("kind", "basic"))]
    pub user: Option<String>,
    /// The header that carries the key (api-key).
    #[arg(long, value_name = "NAME", conflicts_with = "query")]
    pub header: Option<String>,
    /// The query parameter that carries the key (api-key).
    #[arg(long, value_name = "NAME")]
    pub query: Option<String>,
    /// A base URL the credential may be sent to (HTTP kinds; repeatable).
    #[arg(long = "bind", value_name = "URL")]
    pub bind: Vec<String>,
    /// An SSH user@host the credential may be used for (SSH kinds; repeatable).
    #[arg(long = "bind-ssh", value_name = "USER@HOST")]
    pub bind_ssh: Vec<String>,
    /// Also ask for the private key's passphrase (ssh-key, ssh-certificate-authority).
    #[arg(long)]
    pub key_passphrase: bool,
    /// The PEM file of the certificate chain, leaf first (client-certificate; public, so it
    /// is read from a file; the private key is read from stdin).
    #[arg(
        long,
        value_name = "FILE",
        required_if_eq("kind", "client-certificate")
    )]
    pub certificate_chain: Option<std::path::PathBuf>,
    /// How long each user certificate the CA signs is valid, in seconds, 30 to 3600
    /// (ssh-certificate-authority; default 300).
    #[arg(long, value_name = "SECS")]
    pub validity: Option<u32>,
    /// Replace an existing credential of that name (kind, binding and value).
    #[arg(long)]
    pub replace: bool,
}

/// Credential kinds on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[non_exhaustive]
pub enum KindArg {
    /// `Authorization: Bearer <token>`.
    Bearer,
    /// HTTP basic (--user; the password is asked for).
    Basic,
    /// An API key in a header (--header) or query parameter (--query).
    ApiKey,
    /// An OpenSSH private key (pasted or piped, up to its END line).
    SshKey,
    /// An SSH password.
    SshPassword,
    /// An mTLS client certificate: the chain from --certificate-chain FILE, the PEM private
    /// key pasted or piped (up to its END line).
    ClientCertificate,
    /// An OpenSSH certificate authority that signs short-lived user certificates: its
    /// OpenSSH private key pasted or piped (up to its END line); --validity SECS.
    #[value(alias = "ssh-ca")]
    SshCertificateAuthority,
}

/// Output format options.
#[derive(Debug, Args)]
#[non_exhaustive]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `sallyport audit …`
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum AuditCommand {
    /// Check the hash chain and the attempt rows against it (exit 8 and the first break when
    /// it is damaged).
    Verify {
        /// Also compare with a head exported earlier (JSON `{"count":…,"hash":…}`), which
        /// detects truncation.
        #[arg(long, value_name = "FILE")]
        head: Option<PathBuf>,
        /// Also check the heads signed with this public key (written by `audit keygen`):
        /// reports the last signed record, and fails when any record comes after it.
        #[arg(long, value_name = "FILE")]
        public_key: Option<PathBuf>,
        /// Report only this audit shard: its chain, and with `--public-key` its signed heads
        /// and its head in every checkpoint (exit 8 only when this shard is damaged). Without
        /// it every shard is checked, and the first break in any fails.
        #[arg(long, value_name = "NAME")]
        shard: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write every audit record as JSON lines (for SIEM pipelines).
    Export {
        /// Write to this file instead of standard output.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Also write the chain head (for a later `verify --head`) to this file.
        #[arg(long, value_name = "FILE")]
        head_output: Option<PathBuf>,
    },
    /// List attempts left between intent and outcome (after a crash).
    Unresolved(ListArgs),
    /// Create an Ed25519 key pair for signing the chain head: the secret key in FILE (mode
    /// 0600; give it to the executor, e.g. `SqliteJournalBuilder::signing_key`) and the public
    /// key in FILE.pub (for `verify --public-key`). Never replaces an existing file.
    Keygen {
        /// The secret key file to create.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Where to write the public key [default: FILE.pub].
        #[arg(long, value_name = "FILE")]
        public_out: Option<PathBuf>,
    },
    /// Sign a checkpoint over the whole chain with the journal's key and store it in the
    /// journal: a Merkle root over every record (per shard; today the one chain `default`),
    /// which `prove` makes inclusion proofs against and `verify --public-key` checks. Exit 8
    /// when the chain is broken (nothing is signed). Run it on demand or from a timer.
    Checkpoint {
        /// The secret key file (written by `audit keygen`, mode 0600).
        #[arg(long, value_name = "FILE")]
        signing_key: PathBuf,
        /// Keep running and sign a checkpoint every SECONDS, whenever records were appended
        /// since the last one (none otherwise); one line per checkpoint. Stop it with a
        /// signal. A broken chain is reported on standard error and not signed, and the next
        /// period tries again.
        #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
        every: Option<u64>,
        /// Print the checkpoint as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write an inclusion proof for one receipt: the record as stored, its Merkle path and
    /// the newest signed checkpoint that covers it. Anyone checks it with `check-proof` and the
    /// public key alone. Exit 5 for an unknown receipt, 20 when no checkpoint covers the
    /// record yet, 8 when the journal no longer matches its checkpoint.
    Prove {
        /// The receipt id (`rcpt_…`) the agent was given.
        receipt: String,
        /// Write the proof to this new file instead of standard output (never replaced).
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Use the newest checkpoint signed by this public key, and check the proof with it
        /// before writing it.
        #[arg(long, value_name = "FILE")]
        public_key: Option<PathBuf>,
    },
    /// Retention: sign a fresh checkpoint, write the shard's records since its last seal up to
    /// it to a new file (`sallyport-sealed-range-v1`: a header line with the checkpoint, then
    /// one JSON line per record exactly as stored), fsync it, read it back and verify it, and
    /// only then prune those records from the journal. What remains still verifies (from an
    /// anchor a signed checkpoint commits to); the file verifies with `check-export` and the
    /// public key alone. Never replaces a file (exit 6). Exit 8 when the chain is broken,
    /// 21 when there is nothing new to seal, 22 when the journal refuses the prune (the file
    /// is kept, nothing is deleted).
    Seal {
        /// The secret key file (written by `audit keygen`, mode 0600).
        #[arg(long, value_name = "FILE")]
        signing_key: PathBuf,
        /// The shard to seal.
        #[arg(long, value_name = "NAME", default_value = "default")]
        shard: String,
        /// The export file to create.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Check a sealed range written by `seal` with the public key alone (no journal needed):
    /// every record's link and hash, and that they hash to the signed checkpoint's root and
    /// head. Exit 19 when it does not verify (an edited, removed, reordered or added line, a
    /// truncated file, a changed header, another key), 7 when the file is not a sealed range.
    CheckExport {
        /// The export file.
        file: PathBuf,
        /// The journal's public key (written by `audit keygen`).
        #[arg(long, value_name = "FILE")]
        public_key: PathBuf,
        /// Print what the file shows as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check an inclusion proof written by `prove` with the public key alone (no journal
    /// needed). Exit 19 when it does not verify, 7 when the file is not a proof.
    CheckProof {
        /// The proof file.
        proof: PathBuf,
        /// The journal's public key (written by `audit keygen`).
        #[arg(long, value_name = "FILE")]
        public_key: PathBuf,
        /// Print what the proof shows as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `sallyport approvals …`
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum ApprovalsCommand {
    /// List parked calls, newest first: id, state, action, effect, objects, session, expiry.
    List(ApprovalsListArgs),
    /// Show one parked call's action card: what it does, the agent's reason (escaped, marked
    /// as the agent's words), the exact request with its real host, the definition check, who
    /// asked, the expiry, the decision and the result.
    Show {
        /// The approval id (`apr_…`).
        id: String,
        /// Print the approval as JSON (non-ASCII written as \u escapes).
        #[arg(long)]
        json: bool,
    },
    /// Approve a parked call (exit 9 when it was already decided or this approver was already
    /// counted, 10 when it expired, 14 when refused). With a quorum, each distinct approver
    /// counts once and the last one needed approves it. The plain `sallyport` binary only
    /// records the decision: the application that parked the call sends it when it resumes
    /// approved calls. An application's own command line (`sallyport_cli::run_with_executor`)
    /// also sends it at once.
    Approve(DecideArgs),
    /// List remembered approvals, newest first: id, standing (live, revoked, expired),
    /// action, scope, who remembered it, expiry.
    Remembered {
        /// Only those of this action.
        #[arg(long, value_name = "ACTION")]
        action: Option<String>,
        /// Print JSON (non-ASCII written as \u escapes).
        #[arg(long)]
        json: bool,
    },
    /// Revoke a remembered approval (`rem_…`): the next call it would have covered is asked
    /// again. The revocation is audited; revoking one already revoked changes nothing (exit 9).
    Revoke {
        /// The remembered approval id (`rem_…`).
        id: String,
        /// Who revokes, as the audit record names them [default: $USER, else `cli`].
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Deny a parked call; the agent is told the reason (exit 9 when it was already decided,
    /// 10 when it expired, 14 when refused). Nothing is sent.
    Deny(DenyArgs),
    /// Carry out approved calls not yet sent. Needs the application's actions: works in an
    /// application's own command line (`sallyport_cli::run_with_executor`); the plain
    /// `sallyport` binary refuses it (exit 2). An application resumes approved calls itself
    /// when it starts.
    Resume {
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Verify the approvers' Ed25519 signatures on an approval's decisions (exit 13 when one
    /// does not verify, or when `--public-key` is given and a decision is unsigned or signed
    /// by another key).
    Verify {
        /// The approval id (`apr_…`).
        id: String,
        /// Only accept signatures by this public key (64 hex characters, or a file holding
        /// them).
        #[arg(long, value_name = "HEX_OR_FILE")]
        public_key: Option<String>,
    },
    /// Make an approver's Ed25519 key: writes the secret key (64 hex characters, mode 0600)
    /// to FILE, which must not exist, and prints the public key.
    Keygen {
        /// Where the secret key is written.
        file: std::path::PathBuf,
    },
    /// List the notifications of parked calls that could not be delivered after every try
    /// (the dead-letter file of `sallyport_webhook::Notifier`), oldest first: when, the
    /// approval, its action, where it went, how many tries, and why the last one failed.
    /// Needs no journal; exit 1 when a line of the file is not a dead letter.
    DeadLetters {
        /// The dead-letter file.
        #[arg(long, value_name = "FILE")]
        file: std::path::PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Who decides, and how they prove it (options shared by `approve` and `deny`).
#[derive(Debug, Args)]
#[non_exhaustive]
pub struct ApproverArgs {
    /// Who decides, as the audit record names them [default: $USER (USERNAME on Windows), else `cli`].
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// The approver's display name, recorded beside the subject.
    #[arg(long, value_name = "TEXT")]
    pub name: Option<String>,
    /// A group the approver belongs to, for the decision policy (repeatable). Asserted by
    /// whoever runs the command: on a shared machine give the policy file only to accounts
    /// you trust.
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// Sign the decision with the approver's Ed25519 secret key in FILE (64 hex characters,
    /// as `approvals keygen` writes); `approvals verify` checks it later.
    #[arg(long, value_name = "FILE")]
    pub key: Option<std::path::PathBuf>,
    /// A Cedar decision policy: who may decide which approvals. An approver it does not
    /// permit is refused (exit 14), the refusal is audited and nothing changes.
    #[arg(long, value_name = "FILE", env = "SALLYPORT_DECISION_POLICY")]
    pub decision_policy: Option<std::path::PathBuf>,
}

/// `approvals list` options.
#[derive(Debug, Args)]
#[non_exhaustive]
pub struct ApprovalsListArgs {
    /// Only approvals in this state (repeatable) [default: all].
    #[arg(long, value_enum, value_name = "STATE")]
    pub state: Vec<StateArg>,
    /// Print JSON instead of a table (non-ASCII written as \u escapes).
    #[arg(long)]
    pub json: bool,
}

/// An approval's state on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[non_exhaustive]
pub enum StateArg {
    /// Waiting for a human.
    Awaiting,
    /// Approved, not yet sent.
    Approved,
    /// Denied.
    Denied,
    /// Expired undecided.
    Expired,
    /// Being sent (or interrupted while sending).
    Executing,
    /// Carried out; the result is stored.
    Finished,
}

/// `approvals approve` options.
#[derive(Debug, Args)]
#[non_exhaustive]
pub struct DecideArgs {
    /// The approval id (`apr_…`).
    pub id: String,
    /// Who decides, and how they prove it.
    #[command(flatten)]
    pub approver: ApproverArgs,
    /// Why (kept in the audit record).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Approve and remember: later calls of this action within the scope go out without
    /// asking, while the action's definition is unchanged, until revoked (`approvals
    /// revoke`) or expired (30 days at most). `exact` (the same request again), `session`
    /// (any arguments in this call's session) or `window=DURATION` (any arguments, e.g.
    /// `window=8h`, `window=7d`; s, m, h, d; at most 30d). Refused (exit 14, nothing decided)
    /// for an irreversible_or_broad action and for a call that needs several approvers.
    #[arg(long, value_name = "SCOPE", value_parser = parse_remember)]
    pub remember: Option<RememberArg>,
}

/// What `--remember` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RememberArg {
    /// `exact`: the same prepared request again.
    Exact,
    /// `session`: any arguments in the parked call's session.
    Session,
    /// `window=DURATION`: any arguments until the window ends.
    Window(std::time::Duration),
}

/// Parses `exact`, `session` or `window=DURATION` (a whole number with `s`, `m`, `h` or `d`).
fn parse_remember(text: &str) -> Result<RememberArg, String> {
    match text {
        "exact" => return Ok(RememberArg::Exact),
        "session" => return Ok(RememberArg::Session),
        _ => {}
    }
    let usage =
        "expected `exact`, `session` or `window=DURATION` (e.g. window=8h; units s, m, h, d)";
    let Some(span) = text.strip_prefix("window=") else {
        return Err(usage.to_owned());
    };
    let (number, unit) = span.split_at(span.len().saturating_sub(1));
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(usage.to_owned()),
    };
    let n: u64 = number.parse().map_err(|_| usage.to_owned())?;
    Ok(RememberArg::Window(std::time::Duration::from_secs(
        n.saturating_mul(seconds),
    )))
}

/// `approvals deny` options.
#[derive(Debug, Args)]
#[non_exhaustive]
pub struct DenyArgs {
    /// The approval id (`apr_…`).
    pub id: String,
    /// Why; the agent is told (kept in the audit record).
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// Who decides, and how they prove it.
    #[command(flatten)]
    pub approver: ApproverArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::parse_args(std::iter::once("sallyport").chain(args.iter().copied()))
    }

    fn long_help(path: &[&str]) -> String {
        let mut command = Cli::command_line();
        // Global options reach the subcommands when the command is built.
        command.build();
        let mut current = &mut command;
        for name in path {
            current = current.find_subcommand_mut(name).expect("a subcommand");
        }
        current.render_long_help().to_string()
    }

    #[test]
    fn remember_scopes_parse_and_anything_else_is_refused() {
        use std::time::Duration;
        assert_eq!(parse_remember("exact"), Ok(RememberArg::Exact));
        assert_eq!(parse_remember("session"), Ok(RememberArg::Session));
        assert_eq!(
            parse_remember("window=8h"),
            Ok(RememberArg::Window(Duration::from_secs(8 * 3600)))
        );
        assert_eq!(
            parse_remember("window=7d"),
            Ok(RememberArg::Window(Duration::from_secs(7 * 86_400)))
        );
        for bad in [
            "forever",
            "window=",
            "window=8",
            "window=8x",
            "window=-1h",
            "Exact",
        ] {
            let err = parse_remember(bad).expect_err(bad);
            assert!(err.contains("window=DURATION"), "{bad}: {err}");
        }
        let parsed =
            parse(&["approvals", "approve", "apr_1", "--remember", "window=30m"]).expect("parses");
        let Command::Approvals(ApprovalsCommand::Approve(args)) = parsed.command else {
            panic!("approve");
        };
        assert_eq!(
            args.remember,
            Some(RememberArg::Window(Duration::from_secs(1800)))
        );
    }

    #[test]
    fn scaffold_help_lists_only_its_own_options() {
        let help = long_help(&["scaffold"]);
        for option in [
            "--openapi",
            "--operation",
            "--out",
            "--force",
            "--credential",
        ] {
            assert!(help.contains(option), "{option} missing from:\n{help}");
        }
        for option in [
            "--vault",
            "--keychain",
            "--keychain-service",
            "--passphrase-file",
            "--journal",
        ] {
            assert!(!help.contains(option), "{option} in:\n{help}");
        }
    }

    #[test]
    fn every_other_command_still_lists_the_store_options() {
        for path in [
            &["vault"][..],
            &["vault", "set"],
            &["audit", "verify"],
            &["approvals", "list"],
            &["reconcile"],
            &["console"],
        ] {
            let help = long_help(path);
            for option in ["--vault", "--keychain", "--passphrase-file", "--journal"] {
                assert!(help.contains(option), "{path:?}: {option} missing");
            }
        }
    }

    #[test]
    fn store_options_are_taken_before_or_after_the_command_and_after_wins() {
        let before = parse(&["--vault", "/a.spv", "vault", "list"]).expect("parses");
        assert_eq!(before.vault, Some(PathBuf::from("/a.spv")));
        let after = parse(&["vault", "list", "--vault", "/b.spv"]).expect("parses");
        assert_eq!(after.vault, Some(PathBuf::from("/b.spv")));
        let between = parse(&["vault", "--passphrase-file", "/p", "unlock"]).expect("parses");
        assert_eq!(between.passphrase_file, Some(PathBuf::from("/p")));
        let both =
            parse(&["--vault", "/a.spv", "vault", "list", "--vault", "/b.spv"]).expect("parses");
        assert_eq!(both.vault, Some(PathBuf::from("/b.spv")));
        let keychain = parse(&[
            "vault",
            "list",
            "--keychain",
            "keyutils",
            "--keychain-service",
            "ops",
        ])
        .expect("parses");
        assert_eq!(keychain.keychain, Some(KeychainArg::Keyutils));
        assert_eq!(keychain.keychain_service, "ops");
        let default_service = parse(&["vault", "list"]).expect("parses");
        assert_eq!(default_service.keychain_service, "sallyport");
        let journal = parse(&[
            "audit",
            "verify",
            "--journal",
            "postgres://u:secret@db:5432/journal",
        ])
        .expect("parses");
        assert_eq!(
            journal.journal,
            Some(JournalLocation::Postgres(
                "postgres://u:secret@db:5432/journal".to_owned()
            ))
        );
    }

    #[test]
    fn scaffold_refuses_the_store_options_after_its_name() {
        let refused = parse(&[
            "scaffold",
            "--openapi",
            "api.json",
            "--operation",
            "getNote",
            "--vault",
            "/a.spv",
        ])
        .expect_err("scaffold keeps no vault");
        assert_eq!(refused.kind(), clap::error::ErrorKind::UnknownArgument);
    }
}
