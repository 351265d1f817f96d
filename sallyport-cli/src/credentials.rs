//! `sallyport credentials …`: connect an OAuth account through a browser with a loopback
//! redirect (RFC 8252), and the `vault grants` commands (`list`, `disconnect`) under the
//! name a person looks for.
//!
//! `connect` listens on `127.0.0.1` (port 0 unless `--port`), prints the authorization URL
//! [`HttpChannel::connect`] made, tries to open it in a browser, and waits for one redirect
//! to `/callback`. Other paths (a browser's `/favicon.ico`) are answered `404` and the wait
//! goes on; the first request to `/callback` is answered with a short plain page and handed
//! to [`HttpChannel::finish_connect`], whatever it holds. Nothing of the redirect (its code)
//! is printed.

use std::io::Write as _;
use std::time::{Duration, SystemTime};

use sallyport_core::consent::escape;
use sallyport_core::vault::{Vault, VaultError};
use sallyport_http::HttpChannel;
use sallyport_http::oauth::{Connect, ConnectError, Connected};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::args::{Cli, ConnectArgs, CredentialsCommand};
use crate::exit::{Exit, Failure, chain};

/// The largest request head read from the browser.
const MAX_REQUEST_HEAD: usize = 16 * 1024;

/// How long one browser connection may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The path the provider redirects to.
const CALLBACK_PATH: &str = "/callback";

pub(crate) fn run(cli: &Cli, cmd: &CredentialsCommand) -> Result<(), Failure> {
    match cmd {
        // Stored where the grant commands read them (the PostgreSQL grant store when the
        // environment names one).
        CredentialsCommand::Connect(args) => {
            crate::grants::with_grants_vault(crate::vault::unlocked(cli)?, |rt, vault| {
                connect(rt, vault, args)
            })
        }
        // The very commands of `vault grants`.
        CredentialsCommand::Grants(grants) => crate::vault::run_grants(cli, grants),
    }
}

fn connect(
    rt: &tokio::runtime::Runtime,
    vault: &dyn Vault,
    args: &ConnectArgs,
) -> Result<(), Failure> {
    rt.block_on(async {
        let listener = TcpListener::bind(("127.0.0.1", args.port))
            .await
            .map_err(|e| {
                Failure::new(
                    Exit::Failure,
                    format!(
                        "cannot listen on 127.0.0.1:{} for the redirect: {e}",
                        args.port
                    ),
                )
            })?;
        let port = listener
            .local_addr()
            .map_err(|e| Failure::new(Exit::Failure, format!("cannot read the port: {e}")))?
            .port();
        let redirect_uri = format!("http://127.0.0.1:{port}{CALLBACK_PATH}");
        let request = match &args.subject {
            Some(subject) => Connect::subject(args.name.as_str(), subject.as_str()),
            None => Connect::shared(args.name.as_str()),
        }
        .redirect_uri(redirect_uri);
        let channel = HttpChannel::builder().build().map_err(|e| {
            Failure::new(
                Exit::Failure,
                format!("cannot set up the HTTP client: {}", chain(&e)),
            )
        })?;
        let pending = channel
            .connect(vault, request)
            .await
            .map_err(|e| connect_failure(&e))?;
        let url = pending.authorization_url().to_owned();
        println!("To connect {}, open this URL in a browser:", who(args));
        println!();
        println!("{url}");
        println!();
        println!(
            "Waiting up to {} s for the redirect to 127.0.0.1:{port}{CALLBACK_PATH} …",
            args.timeout
        );
        let _ = std::io::stdout().flush();
        if !args.no_browser {
            open_browser(&url);
        }
        let waited = tokio::time::timeout(
            Duration::from_secs(args.timeout),
            wait_for_callback(&listener),
        )
        .await;
        let Ok((mut stream, query)) = waited else {
            return Err(Failure::new(
                Exit::ConnectTimedOut,
                format!(
                    "no redirect came back within {} s; nothing was stored",
                    args.timeout
                ),
            ));
        };
        let finished = channel.finish_connect(vault, pending, &query).await;
        let page = match &finished {
            Ok(_) => "Connected; you can close this tab.\n".to_owned(),
            Err(e) => format!(
                "The account was NOT connected: {}.\nYou can close this tab and run the command again.\n",
                chain(e)
            ),
        };
        let status = if finished.is_ok() {
            "200 OK"
        } else {
            "400 Bad Request"
        };
        respond(&mut stream, status, &page).await;
        let connected = finished.map_err(|e| connect_failure(&e))?;
        print_connected(&connected);
        Ok(())
    })
}

/// `` `github` for subject `alice` `` or `` the shared grant of `github` ``.
fn who(args: &ConnectArgs) -> String {
    match &args.subject {
        Some(subject) => format!("`{}` for subject `{}`", args.name, escape(subject)),
        None => format!("the shared grant of `{}`", args.name),
    }
}

fn print_connected(connected: &Connected) {
    println!("connected");
    println!("  credential: {}", connected.key.credential);
    println!(
        "  subject:    {}",
        connected
            .key
            .subject
            .as_deref()
            .map_or_else(|| "(shared)".to_owned(), |s| escape(s).into_owned())
    );
    let scopes = if connected.scopes.is_empty() {
        "(client defaults)".to_owned()
    } else {
        connected.scopes.join(" ")
    };
    println!("  scopes:     {scopes}");
    println!(
        "  access token expires: {}",
        rfc3339(connected.expires_at).unwrap_or_else(|| "-".to_owned())
    );
}

fn rfc3339(at: SystemTime) -> Option<String> {
    let at = OffsetDateTime::from(at);
    at.replace_millisecond(0).ok()?.format(&Rfc3339).ok()
}

/// Tries to open `url` in the user's browser; never fails the command.
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let spawned = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        // Reaped on a thread of its own, so the wait for the redirect does not depend on it.
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(_) => eprintln!("(could not start {opener}; open the URL yourself)"),
    }
}

/// Accepts connections until one asks for [`CALLBACK_PATH`]: that connection, and the query
/// of its request. Other requests are answered `404`; broken ones are dropped.
async fn wait_for_callback(listener: &TcpListener) -> (TcpStream, String) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let head = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await;
        let Ok(Some(target)) = head else { continue };
        let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
        if path == CALLBACK_PATH {
            let query = query.to_owned();
            return (stream, query);
        }
        respond(&mut stream, "404 Not Found", "Not found.\n").await;
    }
}

/// The request target of a `GET` request head; `None` for anything else.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = zeroize::Zeroizing::new(Vec::with_capacity(1024));
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 || head.len() + n > MAX_REQUEST_HEAD {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|b| *b == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    let (Some("GET"), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    version.starts_with("HTTP/1.").then(|| target.to_owned())
}

/// A short plain-text answer, then the connection closes.
async fn respond(stream: &mut TcpStream, status: &str, body: &str) {
    let answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nCache-Control: no-store\r\nReferrer-Policy: no-referrer\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn connect_failure(e: &ConnectError) -> Failure {
    let exit = match e {
        ConnectError::Refused { .. } | ConnectError::CodeRefused { .. } => Exit::ConnectRefused,
        ConnectError::StateMismatch => Exit::StateMismatch,
        ConnectError::Invalid { .. } => Exit::Usage,
        ConnectError::NotConnectable { .. } => Exit::NotFound,
        ConnectError::Vault(VaultError::Locked) => Exit::Locked,
        _ => Exit::Failure,
    };
    Failure::new(exit, chain(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    #[tokio::test]
    async fn only_a_complete_get_head_yields_its_target() {
        for (sent, expected) in [
            (
                &b"GET /callback?code=c&state=s HTTP/1.1\r\nHost: x\r\n\r\n"[..],
                Some("/callback?code=c&state=s"),
            ),
            (&b"POST /callback HTTP/1.1\r\n\r\n"[..], None),
            (&b"GET /callback\r\n\r\n"[..], None),
            (&b"GET /callback HTTP/1.1\r\nHost: x\r\n"[..], None),
        ] {
            let (mut client, mut server) = pair().await;
            client.write_all(sent).await.unwrap();
            client.shutdown().await.unwrap();
            assert_eq!(read_head(&mut server).await.as_deref(), expected);
        }
    }

    #[test]
    fn the_expiry_is_printed_in_rfc_3339_to_the_second() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_767_225_600_123);
        assert_eq!(rfc3339(at).as_deref(), Some("2026-01-01T00:00:00Z"));
    }
}
