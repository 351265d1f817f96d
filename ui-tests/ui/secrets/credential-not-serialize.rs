// A resolved credential cannot be serialized: `Credential` does not implement `Serialize`.
use sallyport_core::vault::{Binding, Credential, CredentialKind, CredentialMeta, Secret};

fn main() {
    let meta = CredentialMeta::new("deploy-api", CredentialKind::Bearer, Binding::url("https://a.example"));
    let credential = Credential::new(meta, Secret::new("hunter2"));
    let _ = serde_json::to_value(&credential);
}
