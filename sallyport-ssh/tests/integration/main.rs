//! The SSH channel through a real executor against a real OpenSSH sshd on loopback, one module
//! per area, linked into one test binary: commands, user certificates, and a login shell that is
//! not POSIX.
//! `ssh_flood` beside this directory is a binary of its own: it measures its process's peak
//! memory.
//!
//! Run one area with its module path, e.g.
//! `cargo test -p sallyport-ssh --test integration ssh_shell::`.

mod ssh_certificates;
mod ssh_channel;
mod ssh_shell;
