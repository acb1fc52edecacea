//! Attribute macros for [`shedlock`](https://docs.rs/shedlock). (Placeholder: being written.)

use proc_macro::TokenStream;

/// Placeholder.
#[proc_macro_attribute]
pub fn scheduler_lock(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}

/// Placeholder.
#[proc_macro_attribute]
pub fn scheduled(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
