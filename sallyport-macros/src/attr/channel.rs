//! `#[channel(...)]` on the struct.

use syn::Attribute;
use syn::ext::IdentExt as _;

use super::ast::ChannelAttr;
use super::errors::{Errors, unknown_key};
use super::parse::{expect_eq, parse_list, parse_str};

const CHANNEL_KEYS: &[&str] = &["name"];

pub(super) fn parse_channel(attr: &Attribute, errs: &mut Errors) -> ChannelAttr {
    let mut channel = ChannelAttr::default();
    parse_list(attr, errs, |key, input| {
        match key.unraw().to_string().as_str() {
            "name" => {
                expect_eq(input, &key, "name = \"channel\"")?;
                let value = parse_str(input, "name = \"channel\"");
                channel.name.set(key, "channel", value)
            }
            _ => Err(unknown_key(&key, "channel", CHANNEL_KEYS)),
        }
    });
    channel
}
