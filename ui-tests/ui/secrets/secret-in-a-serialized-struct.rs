// A struct holding a secret cannot derive `Serialize`, so a secret cannot ride along in a
// result or an audit record.
use sallyport_core::vault::Secret;

#[derive(serde::Serialize)]
struct Leaky {
    token: Secret,
}

fn main() {
    let _ = Leaky { token: Secret::new("hunter2") };
}
