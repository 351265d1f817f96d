//! `sallyport vault …`

use std::path::PathBuf;

use sallyport_core::vault::{
    ApiKeyPlacement, Binding, ClientCertificate, CredentialKind, CredentialMeta, FileVault,
    KdfParams, KeychainBackend, KeychainVault, Secret, SshBinding, SshCertificateAuthority, Vault,
    VaultAdmin, VaultError, default_data_dir, lock_marker_path,
};
use serde::Serialize;

use crate::args::{Cli, KeychainArg, KindArg, SetArgs, VaultCommand};
use crate::exit::{Exit, Failure};
use crate::prompt::Prompter;

/// The vault file when neither `--vault` nor `SALLYPORT_VAULT` names one.
fn default_vault_path() -> Result<PathBuf, Failure> {
    default_data_dir()
        .map(|d| d.join("vault.spv"))
        .ok_or_else(|| {
            Failure::new(
                Exit::Usage,
                "no home directory is known; name the vault file with --vault",
            )
        })
}

/// An unlocked vault: a file or an OS keychain.
pub(crate) enum Backend {
    File(FileVault),
    Keychain(KeychainVault),
}

impl Backend {
    fn admin(&self) -> &dyn VaultAdmin {
        match self {
            Self::File(v) => v,
            Self::Keychain(v) => v,
        }
    }

    pub(crate) fn vault(&self) -> &dyn Vault {
        match self {
            Self::File(v) => v,
            Self::Keychain(v) => v,
        }
    }
}

fn keychain(cli: &Cli, arg: KeychainArg) -> Result<KeychainVault, Failure> {
    let backend = match arg {
        KeychainArg::Auto => KeychainBackend::Auto,
        KeychainArg::Keyutils => KeychainBackend::KeyUtils,
        KeychainArg::SecretService => KeychainBackend::SecretService,
        KeychainArg::Macos => KeychainBackend::MacOs,
        KeychainArg::Windows => KeychainBackend::Windows,
    };
    let vault = KeychainVault::open(backend, cli.keychain_service.clone())?;
    Ok(match &cli.vault {
        Some(path) => vault.with_lock_marker(lock_marker_path(path)),
        None => vault,
    })
}

fn file_path(cli: &Cli) -> Result<PathBuf, Failure> {
    cli.vault.clone().map_or_else(default_vault_path, Ok)
}

/// The vault, unlocked with the passphrase when it is a file.
fn open_unlocked(cli: &Cli, prompter: &Prompter) -> Result<Backend, Failure> {
    if let Some(arg) = cli.keychain {
        return Ok(Backend::Keychain(keychain(cli, arg)?));
    }
    let vault = FileVault::open(file_path(cli)?);
    // Fail on a missing, damaged or foreign file before asking for anything.
    vault.status()?;
    let passphrase = prompter.passphrase()?;
    match vault.unlock(&passphrase) {
        Ok(()) => Ok(Backend::File(vault)),
        Err(e) => Err(e.into()),
    }
}

/// `vault grants …` and `credentials list|disconnect` (see [`crate::grants::with_grants_vault`]
/// for where the grants are read).
pub(crate) fn run_grants(cli: &Cli, cmd: &crate::args::GrantsCommand) -> Result<(), Failure> {
    let prompter = Prompter::new(cli.passphrase_file.clone());
    crate::grants::run(open_unlocked(cli, &prompter)?, cmd)
}

/// The vault unlocked, as the backend it is (a file or a keychain).
pub(crate) fn unlocked(cli: &Cli) -> Result<Backend, Failure> {
    open_unlocked(cli, &Prompter::new(cli.passphrase_file.clone()))
}

pub(crate) fn run(cli: &Cli, cmd: &VaultCommand) -> Result<(), Failure> {
    let prompter = Prompter::new(cli.passphrase_file.clone());
    match cmd {
        VaultCommand::Init(args) => {
            if let Some(arg) = cli.keychain {
                let vault = keychain(cli, arg)?;
                let n = vault.list()?.len();
                println!(
                    "keychain {} (service `{}`) is ready; {n} credential(s)",
                    vault.backend().as_str(),
                    vault.service()
                );
                return Ok(());
            }
            let path = file_path(cli)?;
            if path.exists() {
                return Err(Failure::new(
                    Exit::AlreadyExists,
                    format!("{} already exists; it was left untouched", path.display()),
                ));
            }
            let params = KdfParams::new(
                args.kdf_memory_mib.saturating_mul(1024),
                args.kdf_iterations,
                args.kdf_parallelism,
            );
            let passphrase = prompter.new_passphrase()?;
            let vault = FileVault::create(&path, &passphrase, params)?;
            vault.lock();
            println!("created vault {}", path.display());
            Ok(())
        }
        VaultCommand::Set(args) => {
            let meta = meta_from(args)?;
            let backend = open_unlocked(cli, &prompter)?;
            let admin = backend.admin();
            if !args.replace && admin.list()?.iter().any(|m| m.name == meta.name) {
                return Err(VaultError::AlreadyExists(meta.name).into());
            }
            let secret = read_secret(&prompter, &meta.name, args.kind, args.key_passphrase)?;
            let stored = if args.replace {
                admin.set(meta, secret)?
            } else {
                admin.add(meta, secret)?
            };
            println!("stored `{}` (version {})", stored.name, stored.version);
            Ok(())
        }
        VaultCommand::List(args) => {
            let backend = open_unlocked(cli, &prompter)?;
            let list = backend.admin().list()?;
            if args.json {
                print_json(&list.iter().map(MetaView::from).collect::<Vec<_>>())?;
            } else if list.is_empty() {
                println!("no credentials");
            } else {
                println!("{:<24} {:<28} {:>7}  BINDING", "NAME", "KIND", "VERSION");
                for meta in &list {
                    let view = MetaView::from(meta);
                    println!(
                        "{:<24} {:<28} {:>7}  {}",
                        view.name,
                        view.kind,
                        view.version,
                        view.binding.join(", ")
                    );
                }
            }
            Ok(())
        }
        VaultCommand::Remove { name } => {
            let backend = open_unlocked(cli, &prompter)?;
            backend.admin().remove(name)?;
            println!("removed `{name}`");
            Ok(())
        }
        VaultCommand::Rotate {
            name,
            key_passphrase,
        } => {
            let backend = open_unlocked(cli, &prompter)?;
            let admin = backend.admin();
            let meta = admin
                .list()?
                .into_iter()
                .find(|m| &m.name == name)
                .ok_or_else(|| VaultError::NotFound(name.clone()))?;
            let kind = match meta.kind {
                CredentialKind::Basic { .. } => KindArg::Basic,
                CredentialKind::ApiKey { .. } => KindArg::ApiKey,
                CredentialKind::SshKey => KindArg::SshKey,
                CredentialKind::SshPassword => KindArg::SshPassword,
                CredentialKind::ClientCertificate(_) => KindArg::ClientCertificate,
                CredentialKind::SshCertificateAuthority(_) => KindArg::SshCertificateAuthority,
                _ => KindArg::Bearer,
            };
            let secret = read_secret(&prompter, name, kind, *key_passphrase)?;
            let rotated = admin.rotate(name, secret)?;
            println!("rotated `{}` (version {})", rotated.name, rotated.version);
            Ok(())
        }
        VaultCommand::Lock => {
            if let Some(arg) = cli.keychain {
                let vault = keychain(cli, arg)?;
                vault.lock_everywhere()?;
                println!("locked; marker {}", vault.lock_marker().display());
            } else {
                let vault = FileVault::open(file_path(cli)?);
                vault.status()?;
                vault.lock_everywhere()?;
                println!(
                    "locked; marker {}",
                    lock_marker_path(vault.path()).display()
                );
            }
            Ok(())
        }
        VaultCommand::Unlock => {
            match open_unlocked(cli, &prompter)? {
                Backend::File(_) => {}
                Backend::Keychain(vault) => vault.unlock()?,
            }
            println!("unlocked; lock marker removed");
            Ok(())
        }
        VaultCommand::Status(args) => status(cli, args.json),
        VaultCommand::Grants(cmd) => run_grants(cli, cmd),
    }
}

#[derive(Serialize)]
struct StatusView {
    backend: String,
    location: String,
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    format_version: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kdf: Option<KdfParams>,
    credentials: usize,
}

fn status(cli: &Cli, json: bool) -> Result<(), Failure> {
    let view = if let Some(arg) = cli.keychain {
        let vault = keychain(cli, arg)?;
        StatusView {
            backend: vault.backend().as_str().to_owned(),
            location: format!("service `{}`", vault.service()),
            state: if vault.lock_marker_present() {
                "locked"
            } else {
                "unlocked"
            },
            format_version: None,
            kdf: None,
            credentials: vault.list()?.len(),
        }
    } else {
        let status = FileVault::open(file_path(cli)?).status()?;
        StatusView {
            backend: "file".into(),
            location: status.path.display().to_string(),
            state: if status.lock_marker {
                "locked"
            } else {
                "unlocked"
            },
            format_version: Some(status.format_version),
            kdf: Some(status.kdf),
            credentials: status.records,
        }
    };
    if json {
        print_json(&view)?;
    } else {
        println!("backend:     {}", view.backend);
        println!("location:    {}", view.location);
        if let (Some(v), Some(kdf)) = (view.format_version, view.kdf) {
            println!("format:      {v}");
            println!(
                "kdf:         argon2id, {} MiB, {} passes, {} lanes",
                kdf.memory_kib / 1024,
                kdf.iterations,
                kdf.parallelism
            );
        }
        println!("credentials: {}", view.credentials);
        println!("state:       {}", view.state);
    }
    if view.state == "locked" {
        return Err(Failure::new(
            Exit::Locked,
            "the vault is locked; `sallyport vault unlock` removes the lock marker",
        ));
    }
    Ok(())
}

pub(crate) fn print_json(value: &impl Serialize) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::new(Exit::Failure, format!("cannot encode JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

/// What `list` shows of a credential.
#[derive(Serialize)]
struct MetaView {
    name: String,
    kind: String,
    version: u64,
    binding: Vec<String>,
}

impl From<&CredentialMeta> for MetaView {
    fn from(meta: &CredentialMeta) -> Self {
        let kind = match &meta.kind {
            CredentialKind::Bearer => "bearer".to_owned(),
            CredentialKind::Basic { user } => format!("basic (user {user})"),
            CredentialKind::ApiKey {
                placement: ApiKeyPlacement::Header(h),
            } => format!("api-key (header {h})"),
            CredentialKind::ApiKey {
                placement: ApiKeyPlacement::Query(q),
            } => format!("api-key (query {q})"),
            CredentialKind::SshKey => "ssh-key".to_owned(),
            CredentialKind::SshPassword => "ssh-password".to_owned(),
            CredentialKind::OAuthClientCredentials(c) => {
                format!("oauth-client-credentials (client {})", c.client_id)
            }
            CredentialKind::OAuthRefresh(c) if c.per_subject => {
                format!(
                    "oauth-refresh (client {}, a grant per subject)",
                    c.client_id
                )
            }
            CredentialKind::OAuthRefresh(c) => format!("oauth-refresh (client {})", c.client_id),
            CredentialKind::ClientCertificate(c) => match c.certificate_count() {
                1 => "client-certificate (1 certificate)".to_owned(),
                n => format!("client-certificate ({n} certificates)"),
            },
            CredentialKind::SshCertificateAuthority(ca) => format!(
                "ssh-certificate-authority (certificates valid {} s)",
                ca.validity_secs
            ),
            _ => "other".to_owned(),
        };
        let mut binding = meta.binding.urls.clone();
        binding.extend(
            meta.binding
                .ssh
                .iter()
                .map(|s| format!("{}@{}", s.user, s.host)),
        );
        Self {
            name: meta.name.clone(),
            kind,
            version: meta.version,
            binding,
        }
    }
}

fn meta_from(args: &SetArgs) -> Result<CredentialMeta, Failure> {
    let usage = |m: &str| Failure::new(Exit::Usage, m.to_owned());
    let kind = match args.kind {
        KindArg::Bearer => CredentialKind::Bearer,
        KindArg::Basic => CredentialKind::Basic {
            user: args
                .user
                .clone()
                .ok_or_else(|| usage("--kind basic needs --user"))?,
        },
        KindArg::ApiKey => CredentialKind::ApiKey {
            placement: match (&args.header, &args.query) {
                (Some(h), None) => ApiKeyPlacement::Header(h.clone()),
                (None, Some(q)) => ApiKeyPlacement::Query(q.clone()),
                _ => return Err(usage("--kind api-key needs --header NAME or --query NAME")),
            },
        },
        KindArg::SshKey => CredentialKind::SshKey,
        KindArg::SshPassword => CredentialKind::SshPassword,
        KindArg::ClientCertificate => {
            let path = args
                .certificate_chain
                .as_ref()
                .ok_or_else(|| usage("--kind client-certificate needs --certificate-chain FILE"))?;
            let chain = std::fs::read_to_string(path).map_err(|e| {
                Failure::new(
                    Exit::Usage,
                    format!("cannot read the certificate chain {}: {e}", path.display()),
                )
            })?;
            CredentialKind::ClientCertificate(ClientCertificate::new(chain))
        }
        KindArg::SshCertificateAuthority => CredentialKind::SshCertificateAuthority(
            SshCertificateAuthority::new().with_validity_secs(
                args.validity
                    .unwrap_or(SshCertificateAuthority::DEFAULT_VALIDITY_SECS),
            ),
        ),
    };
    if args.certificate_chain.is_some() && args.kind != KindArg::ClientCertificate {
        return Err(usage(
            "--certificate-chain is for --kind client-certificate",
        ));
    }
    if args.validity.is_some() && args.kind != KindArg::SshCertificateAuthority {
        return Err(usage("--validity is for --kind ssh-certificate-authority"));
    }
    if args.user.is_some() && args.kind != KindArg::Basic {
        return Err(usage(
            "--user is for --kind basic (SSH users go in --bind-ssh USER@HOST)",
        ));
    }
    if (args.header.is_some() || args.query.is_some()) && args.kind != KindArg::ApiKey {
        return Err(usage("--header and --query are for --kind api-key"));
    }
    if args.key_passphrase
        && !matches!(
            args.kind,
            KindArg::SshKey | KindArg::SshCertificateAuthority
        )
    {
        return Err(usage(
            "--key-passphrase is for --kind ssh-key and ssh-certificate-authority",
        ));
    }
    let mut ssh = Vec::new();
    for pair in &args.bind_ssh {
        let (user, host) = pair
            .split_once('@')
            .ok_or_else(|| usage("--bind-ssh takes USER@HOST"))?;
        ssh.push(SshBinding {
            host: host.to_owned(),
            user: user.to_owned(),
        });
    }
    let meta = CredentialMeta::new(
        args.name.clone(),
        kind,
        Binding {
            urls: args.bind.clone(),
            ssh,
        },
    );
    sallyport_core::vault::check_meta(&meta)?;
    Ok(meta)
}

fn read_secret(
    prompter: &Prompter,
    name: &str,
    kind: KindArg,
    key_passphrase: bool,
) -> Result<Secret, Failure> {
    let secret = match kind {
        KindArg::SshKey | KindArg::SshCertificateAuthority => {
            let label = if kind == KindArg::SshKey {
                format!("SSH private key for `{name}`")
            } else {
                format!("SSH CA private key for `{name}`")
            };
            let key = prompter.private_key(&label)?;
            let mut secret = Secret::new(key.as_str());
            if key_passphrase {
                let p = prompter.secret(&format!("Passphrase of the key `{name}`"))?;
                secret = secret.with_passphrase(p.as_str());
            }
            secret
        }
        KindArg::Basic => Secret::new(prompter.secret(&format!("Password for `{name}`"))?.as_str()),
        KindArg::SshPassword => Secret::new(
            prompter
                .secret(&format!("SSH password for `{name}`"))?
                .as_str(),
        ),
        KindArg::ApiKey => Secret::new(prompter.secret(&format!("API key for `{name}`"))?.as_str()),
        KindArg::Bearer => Secret::new(prompter.secret(&format!("Token for `{name}`"))?.as_str()),
        KindArg::ClientCertificate => Secret::new(
            prompter
                .private_key(&format!(
                    "PEM private key of the client certificate `{name}`"
                ))?
                .as_str(),
        ),
    };
    Ok(secret)
}
