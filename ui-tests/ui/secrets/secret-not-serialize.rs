// A secret value cannot be serialized: `Secret` does not implement `Serialize`.
use sallyport_core::vault::Secret;

fn main() {
    let secret = Secret::new("hunter2");
    let _ = serde_json::to_string(&secret);
}
