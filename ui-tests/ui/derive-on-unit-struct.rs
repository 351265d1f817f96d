use sallyport_core::Action;
use schemars::JsonSchema;
use serde::Deserialize;

/// List the hosts.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "list_hosts", effect = observe)]
struct ListHosts;

fn main() {}
