// A resolved credential cannot be formatted for display: `Credential` does not implement `Display`.
use sallyport_core::vault::{Binding, Credential, CredentialKind, CredentialMeta, Secret};

fn main() {
    let meta = CredentialMeta::new("deploy-api", CredentialKind::Bearer, Binding::url("https://a.example"));
    let credential = Credential::new(meta, Secret::new("hunter2"));
    let _ = credential.to_string();
}
