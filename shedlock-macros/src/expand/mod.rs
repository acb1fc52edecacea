//! Code generation from a validated [`LockedFn`] or [`ScheduledFn`]. The generated code names
//! only `::shedlock::__private::*`, `::shedlock::{Result, TaskResult, Job}` in signatures, and
//! `::std`/`::core`. The `#[scheduled]` half is in [`scheduled`](mod@scheduled).

mod scheduled;

pub(crate) use scheduled::scheduled;

use std::time::Duration;

use proc_macro2::{Literal, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{GenericParam, ItemFn, LitStr, ReturnType};

use crate::scheduler_lock::{LockDuration, LockName, LockedFn, NamePiece};

/// What `#[scheduled]` leaves as the arguments of the `#[scheduler_lock]` it expanded itself:
/// that attribute then expands to the item unchanged.
pub(crate) const EXPANDED_BY_SCHEDULED: &str = "__shedlock_expanded_by_scheduled";

/// `tokens` followed by `error` as `compile_error!`: the user's item survives next to the
/// error, so an IDE keeps working and follow-on errors stay few (tokio-macros' pattern).
pub(crate) fn token_stream_with_error(mut tokens: TokenStream, error: syn::Error) -> TokenStream {
    tokens.extend(error.into_compile_error());
    tokens
}

/// ```text
/// #(#attrs)* #vis async fn #ident #generics (#inputs)
///     -> ::shedlock::Result<::shedlock::TaskResult<#ret>> #where_clause
/// {
///     let __shedlock_name: ::std::string::String = ::std::format!("repo_sync_{}", repository_id);
///     // Only for a duration given as an expression; spanned on it:
///     let __shedlock_lock_at_most_for: ::shedlock::__private::Duration = #expr;
///     ::shedlock::__private::run_locked(
///         __shedlock_name,
///         __shedlock_lock_at_most_for, // or, for a literal:
///         ::shedlock::__private::Duration::new(#least_secs, #least_nanos),
///         ::shedlock::__private::body::<#ret, _>(async move {
///             if let ::core::option::Option::Some(__shedlock_ret) = ::core::option::Option::None::<#ret> {
///                 #[allow(unreachable_code)]
///                 return __shedlock_ret;
///             }
///             let __shedlock_ret: #ret = #block;
///             #[allow(unreachable_code)]
///             __shedlock_ret
///         }),
///     )
///     .await
/// }
/// ```
///
/// With an `impl Trait` output, the body is a plain `async move #block` and `body::<_, _>`.
pub(crate) fn scheduler_lock(locked: LockedFn) -> TokenStream {
    locked_fn(locked, None)
}

/// [`scheduler_lock`]'s expansion; with `claim`, the function takes the scheduler's claim as a
/// first parameter of that name (`::shedlock::__private::Claim`) and holds its lock with it
/// (`__private::run_claimed`).
fn locked_fn(locked: LockedFn, claim: Option<&syn::Ident>) -> TokenStream {
    let LockedFn {
        func,
        name,
        lock_at_most_for,
        lock_at_least_for,
    } = locked;
    let ItemFn {
        attrs,
        vis,
        mut sig,
        block,
    } = func;

    // The declared return type keeps the user's tokens and spans.
    let ret = match &sig.output {
        ReturnType::Default => quote!(()),
        ReturnType::Type(_, ty) => ty.to_token_stream(),
    };
    let ret_var = syn::Ident::new("__shedlock_ret", Span::mixed_site());
    let (body_ty, body) = if mentions_impl(ret.clone()) {
        // `impl Trait` can be neither a turbofish argument nor a `let` type: the opaque type
        // is inferred from the body.
        (quote!(_), quote!(async move #block))
    } else {
        // The first `return` fixes the block's output to the declared type, so a `return` or
        // `?` in the body and its tail expression are checked against it, with errors on the
        // user's code (async-trait's inference hint).
        // Spanned on the return type: "return type inferred to be `T` here" points at it.
        let ret_span = match &sig.output {
            ReturnType::Type(_, ty) => ty.span(),
            ReturnType::Default => Span::call_site(),
        };
        let hint_var = syn::Ident::new("__shedlock_ret", Span::mixed_site().located_at(ret_span));
        let hint = quote_spanned! {ret_span=>
            if let ::core::option::Option::Some(#hint_var) = ::core::option::Option::None::<#ret> {
                #[allow(unreachable_code)]
                return #hint_var;
            }
        };
        let body = quote! {
            async move {
                #hint
                let #ret_var: #ret = #block;
                #[allow(unreachable_code)]
                #ret_var
            }
        };
        (ret.clone(), body)
    };
    sig.output = locked_output(&sig.output, &ret);

    // syn keeps a body's inner attributes (`#![allow(...)]`) with the outer ones; they go back
    // inside the body.
    let (inner, outer): (Vec<_>, Vec<_>) = attrs
        .into_iter()
        .partition(|a| matches!(a.style, syn::AttrStyle::Inner(_)));
    let name_var = syn::Ident::new("__shedlock_name", Span::mixed_site());
    let name_expr = name_expr(&name);
    let (at_most_let, at_most) = duration_arg(lock_at_most_for, "__shedlock_lock_at_most_for");
    let (at_least_let, at_least) = duration_arg(lock_at_least_for, "__shedlock_lock_at_least_for");
    let body = quote!(::shedlock::__private::body::<#body_ty, _>(#body));
    let call = match claim {
        None => quote! {
            ::shedlock::__private::run_locked(#name_var, #at_most, #at_least, #body)
        },
        Some(claim) => {
            sig.inputs
                .insert(0, syn::parse_quote!(#claim: ::shedlock::__private::Claim));
            quote! {
                ::shedlock::__private::run_claimed(#claim, #name_var, #at_most, #at_least, #body)
            }
        }
    };
    quote! {
        #(#outer)*
        #vis #sig {
            #(#inner)*
            let #name_var: ::std::string::String = #name_expr;
            #at_most_let
            #at_least_let
            #call.await
        }
    }
}

/// A locked function's output: `Result<TaskResult<ret>>`, behind the function's own arrow.
fn locked_output(output: &ReturnType, ret: &TokenStream) -> ReturnType {
    let arrow = match output {
        ReturnType::Type(arrow, _) => *arrow,
        ReturnType::Default => syn::Token![->](Span::call_site()),
    };
    ReturnType::Type(
        arrow,
        Box::new(syn::Type::Verbatim(
            quote!(::shedlock::Result<::shedlock::TaskResult<#ret>>),
        )),
    )
}

/// `String::from("literal")`, or `format!("text_{}", param)` with literal braces re-escaped.
fn name_expr(name: &LockName) -> TokenStream {
    let span = name.span;
    let mut format = String::new();
    let mut args = Vec::new();
    for piece in &name.pieces {
        match piece {
            NamePiece::Text(text) => format.push_str(&text.replace('{', "{{").replace('}', "}}")),
            NamePiece::Param(param) => {
                format.push_str("{}");
                args.push(param);
            }
        }
    }
    if args.is_empty() {
        let text: String = name
            .pieces
            .iter()
            .map(|p| match p {
                NamePiece::Text(t) => t.as_str(),
                NamePiece::Param(_) => "",
            })
            .collect();
        let text = LitStr::new(&text, span);
        quote_spanned!(span=> ::std::string::String::from(#text))
    } else {
        let format = LitStr::new(&format, span);
        quote_spanned!(span=> ::std::format!(#format, #(#args),*))
    }
}

/// A lock duration for `run_locked`: a literal's constant, or, for an expression, a `let` that
/// evaluates it (before the body's `async move` captures the parameters) and the variable it
/// binds.
///
/// The `let` is spanned on the user's expression, so an expression of another type is a
/// "mismatched types: expected `Duration`" error pointing at it. The variable is
/// [`Span::mixed_site`], so the expression cannot see it (nor shadow it).
fn duration_arg(duration: LockDuration, var: &str) -> (TokenStream, TokenStream) {
    match duration {
        LockDuration::Fixed(duration) => (TokenStream::new(), duration_expr(duration)),
        LockDuration::Runtime(expr) => {
            let var = syn::Ident::new(var, Span::mixed_site());
            let span = expr.span();
            let binding = quote_spanned! {span=>
                let #var: ::shedlock::__private::Duration = #expr;
            };
            (binding, var.to_token_stream())
        }
    }
}

/// `::shedlock::__private::Duration::new(secs, nanos)`: exact for every duration up to the
/// 1000-year limit (nanoseconds in a `u64` would stop at 584 years).
fn duration_expr(duration: Duration) -> TokenStream {
    let secs = Literal::u64_suffixed(duration.as_secs());
    let nanos = Literal::u32_suffixed(duration.subsec_nanos());
    quote!(::shedlock::__private::Duration::new(#secs, #nanos))
}

/// Whether a type's tokens contain `impl` (an `impl Trait` anywhere inside).
fn mentions_impl(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Ident(ident) => ident == "impl",
        TokenTree::Group(group) => mentions_impl(group.stream()),
        _ => false,
    })
}

#[cfg(test)]
mod tests;
