//! `sallyport console`: the web console for approvals and the audit trail
//! ([`sallyport_console`]), served on its own.
//!
//! The plain binary has no executor: its console records decisions in the journal but
//! cannot carry calls out; the application that parked them does (its approval worker, at
//! its start, or the agent's `check_approval`). Through `run_with_executor` the console
//! decides with the application's executor and carries approved calls out at once.

use std::net::SocketAddr;
use std::path::PathBuf;

use sallyport_console::{Console, LoginToken, OidcLogin};
use sallyport_core::Executor;

use crate::args::Cli;
use crate::exit::{Exit, Failure};

/// `console` options.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The plain `sallyport` binary has no executor: this console records \
decisions, and the application that parked a call carries it out (its approval worker, at its \
start, or the agent's `check_approval`)."
)]
pub struct ConsoleArgs {
    /// Where to listen. A non-loopback address is refused unless --behind-tls.
    #[arg(long, default_value = "127.0.0.1:8640", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// The console user every decision is recorded as (`decided_by`) [default: $USER].
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// Read the login token from the first line of this file (at least 32 bytes)
    /// instead of generating one and printing it once.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// The console is served over TLS terminated in front of it: the cookie is `Secure`, and
    /// a non-loopback --listen is accepted.
    #[arg(long)]
    pub behind_tls: bool,
    /// Approvers sign in with OpenID Connect at this provider: its issuer URL, exactly as
    /// its ID tokens name it (`https://…`, or `http://` on a loopback address). Each decision
    /// then records the approver's subject, name and groups. Needs --oidc-client-id and
    /// --public-url; without --token-file there is no shared-token login beside it.
    #[arg(long, value_name = "URL", requires_all = ["oidc_client_id", "public_url"])]
    pub oidc_issuer: Option<String>,
    /// The console's client id at the OpenID provider.
    #[arg(long, value_name = "ID", requires = "oidc_issuer")]
    pub oidc_client_id: Option<String>,
    /// Read the console's client secret at the provider (a confidential client) from the
    /// first line of this file. Never printed.
    #[arg(long, value_name = "PATH", requires = "oidc_issuer")]
    pub oidc_client_secret_file: Option<PathBuf>,
    /// The scopes to ask the provider for, comma-separated [default: openid,profile,groups].
    #[arg(
        long,
        value_name = "SCOPES",
        value_delimiter = ',',
        requires = "oidc_issuer"
    )]
    pub oidc_scopes: Vec<String>,
    /// The provider's name on the login page's button ("Sign in with NAME").
    #[arg(long, value_name = "NAME", requires = "oidc_issuer")]
    pub oidc_provider_name: Option<String>,
    /// The URL people reach this console at; register URL/login/oidc/callback as the
    /// redirect URI with the provider.
    #[arg(long, value_name = "URL", requires = "oidc_issuer")]
    pub public_url: Option<String>,
}

impl ConsoleArgs {
    /// The OpenID Connect sign-in the options ask for, if any.
    fn oidc_login(&self) -> Result<Option<OidcLogin>, Failure> {
        let (Some(issuer), Some(client_id), Some(public_url)) =
            (&self.oidc_issuer, &self.oidc_client_id, &self.public_url)
        else {
            return Ok(None);
        };
        let mut login = OidcLogin::new(issuer, client_id, public_url);
        if let Some(path) = &self.oidc_client_secret_file {
            login = login.client_secret(read_client_secret(path)?);
        }
        if !self.oidc_scopes.is_empty() {
            login = login.scopes(self.oidc_scopes.iter().map(|s| s.trim()));
        }
        if let Some(name) = &self.oidc_provider_name {
            login = login.provider_name(name);
        }
        Ok(Some(login))
    }
}

/// The first line of the client secret file, which must not be empty. The error names the
/// file, never what it holds.
fn read_client_secret(path: &std::path::Path) -> Result<String, Failure> {
    let text = zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
        Failure::new(
            Exit::Usage,
            format!("--oidc-client-secret-file {}: {e}", path.display()),
        )
    })?);
    let secret = text.lines().next().unwrap_or_default().trim();
    if secret.is_empty() {
        return Err(Failure::new(
            Exit::Usage,
            format!(
                "--oidc-client-secret-file {}: the first line is empty",
                path.display()
            ),
        ));
    }
    Ok(secret.to_owned())
}

pub(crate) fn run(
    cli: &Cli,
    args: &ConsoleArgs,
    executor: Option<&Executor>,
) -> Result<(), Failure> {
    sallyport_console::check_listen(args.listen, args.behind_tls)
        .map_err(|e| Failure::new(Exit::Usage, e.to_string()))?;
    let oidc = args.oidc_login()?;
    // With an OpenID sign-in, a shared token only when one is given.
    let (token, generated) = match (&args.token_file, &oidc) {
        (Some(path), _) => (Some(LoginToken::from_file(path)), false),
        (None, None) => (Some(LoginToken::generate()), true),
        (None, Some(_)) => (None, false),
    };
    let token = token
        .transpose()
        .map_err(|e| Failure::new(Exit::Usage, format!("login token: {e}")))?;
    let user = args
        .user
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "console".to_owned());
    // The runtime first: a PostgreSQL journal's tasks run on it.
    let rt = crate::audit::runtime()?;
    let builder = match executor {
        Some(executor) => Console::builder(executor.clone()),
        None => Console::journal_only(crate::audit::open_approval_store(cli, &rt)?),
    };
    let builder = match &token {
        Some(token) => builder.user(user.clone(), token.clone()),
        None => builder,
    };
    let builder = match &oidc {
        Some(login) => builder.oidc_login(login.clone()),
        None => builder,
    };
    let console = builder
        .behind_tls(args.behind_tls)
        .build()
        .map_err(|e| Failure::new(Exit::Usage, e.to_string()))?;
    match &token {
        Some(_) => println!("sallyport console: http://{}/ (user {user})", args.listen),
        None => println!("sallyport console: http://{}/", args.listen),
    }
    if let Some(login) = &oidc {
        println!(
            "approvers sign in with OpenID Connect at {} (redirect URI {})",
            args.oidc_issuer.as_deref().unwrap_or_default(),
            login.redirect_uri()
        );
    }
    if let Some(token) = token.as_ref().filter(|_| generated) {
        println!("login token (shown once): {}", token.expose());
    }
    if executor.is_none() {
        println!(
            "this console records decisions only; the application that parked a call carries it out"
        );
    }
    rt.block_on(console.listen(args.listen))
        .map_err(|e| Failure::new(Exit::Failure, e.to_string()))
}
