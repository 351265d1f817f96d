// A secret value cannot be formatted for display: `Secret` does not implement `Display`.
use sallyport_core::vault::Secret;

fn main() {
    let secret = Secret::new("hunter2");
    println!("{secret}");
}
