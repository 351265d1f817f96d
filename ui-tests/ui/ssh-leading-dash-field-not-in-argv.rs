use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// Search the system log.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "grep_syslog", effect = observe)]
#[ssh(host = "web1", argv = ["grep", "--", "{pattern}", "/var/log/syslog"])]
struct GrepSyslog {
    pattern: String,
    #[ssh(allow_leading_dash)]
    flags: String,
}

fn main() {}
