//! `#[channel(...)]`: a channel of the application's own, by name.

use syn::Error;

use crate::attr::{ChannelAttr, Errors};

pub(super) fn check_channel(channel: &ChannelAttr, path: &syn::Path, errs: &mut Errors) {
    match channel.name.get() {
        Some(name) => {
            let value = name.value();
            if value.trim().is_empty() {
                errs.at(name.span(), "the channel name must not be empty");
            } else if value == "http" || value == "ssh" {
                errs.at(
                    name.span(),
                    format!("`{value}` is a built-in channel; use `#[{value}(...)]` instead"),
                );
            }
        }
        None if channel.name.key.is_none() => errs.push(Error::new_spanned(
            path,
            "missing `name` in #[channel]; add `name = \"channel\"`",
        )),
        None => {}
    }
}
