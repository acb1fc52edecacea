//! Code generation from a validated [`LockedFn`] or [`ScheduledFn`]. The generated code names
//! only `::shedlock::__private::*`, `::shedlock::{Result, TaskResult, Job}` in signatures, and
//! `::std`/`::core`.

use std::time::Duration;

use proc_macro2::{Literal, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{GenericParam, ItemFn, LitStr, ReturnType};

use crate::scheduled::ScheduledFn;
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

/// The function unchanged (its `#[scheduler_lock]` expands next), plus a type namespace item
/// of the same name whose `job` builds the `shedlock::Job`. When the lock's durations are
/// literals, `#[scheduled]` expands the lock itself instead: the body goes into a hidden
/// sibling `__shedlock_claimed_<fn>(claim, args…)` that holds the lock with the scheduler's
/// claim (`__private::run_claimed`), the function calls it with `Claim::none()`, and `job`
/// (`__private::claimed_job`) declares the lock and hands each run's claim to the sibling.
/// Otherwise:
///
/// ```text
/// #func
///
/// /// The scheduled job of [`fn@#ident`]: `#cron` in `#tz`. …
/// #[allow(non_camel_case_types, dead_code, missing_debug_implementations, unreachable_pub)]
/// #vis enum #ident {}
///
/// impl #ident {
///     /// …
///     #[allow(dead_code, unreachable_pub)]
///     #vis fn job #impl_generics (#(#param: #Type),*) -> ::shedlock::Job #where_clause {
///         ::shedlock::__private::job(::core::stringify!(#ident), #cron, #tz, move || {
///             #( let #param = ::core::clone::Clone::clone(&#param); )*
///             async move { #ident::<#type_and_const_params>(#(#param),*).await }
///         })
///     }
/// }
/// ```
///
/// An uninhabited enum rather than a module: a `mod` declared inside a function body cannot
/// name the items of that body (`super::` skips the block), while an `impl` there sees them,
/// so `my_job::job(…)` works wherever the function is declared, doctests included. The enum
/// only occupies the type namespace, beside the function in the value namespace, and both
/// are imported together by `use path::my_job;`. `job` has the function's visibility, which
/// means the same thing on an inherent method of a type declared beside it.
pub(crate) fn scheduled(scheduled: ScheduledFn) -> TokenStream {
    let ScheduledFn {
        func,
        cron,
        time_zone,
        params,
        declared_lock,
    } = scheduled;
    let ident = &func.sig.ident;
    let vis = &func.vis;
    let (impl_generics, _, where_clause) = func.sig.generics.split_for_impl();
    let type_args: Vec<TokenStream> = func
        .sig
        .generics
        .params
        .iter()
        .filter_map(|param| match param {
            GenericParam::Type(t) => Some(t.ident.to_token_stream()),
            GenericParam::Const(c) => Some(c.ident.to_token_stream()),
            GenericParam::Lifetime(_) => None,
        })
        .collect();
    let turbofish = if type_args.is_empty() {
        quote!()
    } else {
        quote!(::<#(#type_args),*>)
    };
    let names: Vec<_> = params.iter().map(|(name, _)| name).collect();
    let types: Vec<_> = params.iter().map(|(_, ty)| ty).collect();
    // A parameter type that is not `Clone` is reported on that type.
    let clones = params.iter().map(
        |(name, ty)| quote_spanned!(ty.span()=> let #name = ::core::clone::Clone::clone(&#name);),
    );

    // The call carries the output type's span, so an output that is not a `JobOutput` is
    // reported on the function's return type.
    let output_span = match &func.sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => Span::call_site(),
    };
    let cron_text = cron.value();
    let tz_text = time_zone.value();
    let type_doc = format!(
        " The scheduled job of [`fn@{ident}`]: `{cron_text}` in `{tz_text}`.\n\n \
         `{ident}::job(…)` returns the `shedlock::Job` to register with a `shedlock::Scheduler`; \
         the function itself stays callable (under its lock) by hand."
    );
    let job_doc = format!(
        " The `shedlock::Job` that calls [`fn@{ident}`] at each tick of `{cron_text}` in \
         `{tz_text}`, with these arguments (cloned for each run)."
    );
    let cron = LitStr::new(&cron_text, cron.span());
    let time_zone = LitStr::new(&tz_text, time_zone.span());
    let declared = declared_lock.and_then(|locked| {
        match (&locked.lock_at_most_for, &locked.lock_at_least_for) {
            (LockDuration::Fixed(at_most), LockDuration::Fixed(at_least)) => {
                let durations = (*at_most, *at_least);
                Some((locked, durations))
            }
            _ => None,
        }
    });
    let (items, job) = match declared {
        Some((locked, (at_most, at_least))) => {
            // The lock is known at compile time: `job()` declares it, and each run gets the
            // scheduler's claim of it as an argument, through a hidden sibling of the
            // function that holds the lock with it; the function itself calls the sibling
            // with no claim. The lock's name is rendered before the arguments move into
            // the run.
            let name_var = syn::Ident::new("__shedlock_lock_name", Span::mixed_site());
            let name = name_expr(&locked.name);
            let (at_most, at_least) = (duration_expr(at_most), duration_expr(at_least));
            let sibling_ident = quote::format_ident!("__shedlock_claimed_{}", ident);
            let claim = syn::Ident::new("__shedlock_claim", Span::mixed_site());
            // The function keeps its `#[scheduler_lock]` (the caller's import of it stays
            // used), which the marker turns into a no-op.
            let mut outer = func.clone();
            for attr in &mut outer.attrs {
                if attr
                    .path()
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "scheduler_lock")
                {
                    let marker = syn::Ident::new(EXPANDED_BY_SCHEDULED, Span::call_site());
                    let path = attr.path().clone();
                    *attr = syn::parse_quote!(#[#path(#marker)]);
                }
            }
            let wrapper = claiming_wrapper(outer, &sibling_ident, &turbofish, &names);
            let mut sibling = locked;
            sibling.func.attrs.retain(|a| {
                matches!(a.style, syn::AttrStyle::Inner(_)) || a.path().is_ident("cfg")
            });
            sibling.func.attrs.push(syn::parse_quote!(#[doc(hidden)]));
            sibling
                .func
                .attrs
                .push(syn::parse_quote!(#[allow(non_snake_case, clippy::too_many_arguments)]));
            sibling.func.sig.ident = sibling_ident.clone();
            let sibling = locked_fn(sibling, Some(&claim));
            let run = quote! {
                move |#claim: ::shedlock::__private::Claim| {
                    #(#clones)*
                    async move { #sibling_ident #turbofish (#claim, #(#names),*).await }
                }
            };
            let job = quote_spanned! {output_span=>
                let #name_var: ::std::string::String = #name;
                ::shedlock::__private::claimed_job(
                    ::core::stringify!(#ident), #cron, #time_zone, #name_var, #at_most, #at_least, #run,
                )
            };
            (quote!(#wrapper #sibling), job)
        }
        None => (
            func.to_token_stream(),
            plain_job(
                ident,
                &cron,
                &time_zone,
                &turbofish,
                &names,
                clones,
                output_span,
            ),
        ),
    };
    quote! {
        #items

        #[doc = #type_doc]
        #[allow(non_camel_case_types, dead_code, missing_debug_implementations, unreachable_pub)]
        #vis enum #ident {}

        impl #ident {
            #[doc = #job_doc]
            #[allow(dead_code, unreachable_pub)]
            #vis fn job #impl_generics (#(#names: #types),*) -> ::shedlock::Job #where_clause {
                #job
            }
        }
    }
}

/// The `job()` body of a `#[scheduled]` function whose lock is not known at compile time: the
/// function is called on each tick and takes its own lock.
fn plain_job(
    ident: &syn::Ident,
    cron: &LitStr,
    time_zone: &LitStr,
    turbofish: &TokenStream,
    names: &[&syn::Ident],
    clones: impl Iterator<Item = TokenStream>,
    output_span: Span,
) -> TokenStream {
    let run = quote! {
        move || {
            #(#clones)*
            async move { #ident #turbofish (#(#names),*).await }
        }
    };
    // The call carries the output type's span, so an output that is not a `JobOutput` is
    // reported on the function's return type.
    quote_spanned! {output_span=>
        ::shedlock::__private::job(::core::stringify!(#ident), #cron, #time_zone, #run)
    }
}

/// A `#[scheduled]` function with a declared lock, as its callers see it: the same signature
/// and attributes, returning `Result<TaskResult<T>>`, calling its hidden sibling with no claim
/// (so a call by hand takes the lock as `#[scheduler_lock]` would).
fn claiming_wrapper(
    func: ItemFn,
    sibling: &syn::Ident,
    turbofish: &TokenStream,
    names: &[&syn::Ident],
) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        mut sig,
        ..
    } = func;
    let ret = match &sig.output {
        ReturnType::Default => quote!(()),
        ReturnType::Type(_, ty) => ty.to_token_stream(),
    };
    sig.output = locked_output(&sig.output, &ret);
    // The parameters are only passed on: `mut` would be an unused-mut warning here.
    for input in &mut sig.inputs {
        if let syn::FnArg::Typed(typed) = input
            && let syn::Pat::Ident(pat) = &mut *typed.pat
        {
            pat.mutability = None;
        }
    }
    let outer = attrs
        .into_iter()
        .filter(|a| !matches!(a.style, syn::AttrStyle::Inner(_)));
    quote! {
        #(#outer)*
        // `job()` calls the sibling, as it called this function before: unused when never
        // called by hand, which is not worth a warning.
        #[allow(dead_code)]
        #vis #sig {
            #sibling #turbofish (::shedlock::__private::Claim::none(), #(#names),*).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_lock(args: TokenStream, item: TokenStream) -> String {
        let locked = LockedFn::parse(args, item).unwrap_or_else(|e| panic!("{e}"));
        scheduler_lock(locked).to_string()
    }

    #[test]
    fn literal_name_is_a_string_from() {
        let out = expand_lock(
            quote!(name = "a{{b}}", lock_at_most_for = "PT0.5S"),
            quote!(
                async fn job() {}
            ),
        );
        assert!(out.contains(r#"String :: from ("a{b}")"#), "{out}");
        assert!(
            out.contains("Duration :: new (0u64 , 500000000u32)"),
            "{out}"
        );
        assert!(out.contains("Duration :: new (0u64 , 0u32)"), "{out}");
        assert!(out.contains("TaskResult < () >"), "{out}");
        assert!(out.contains("body :: < () , _ >"), "{out}");
    }

    #[test]
    fn template_name_is_a_format() {
        let out = expand_lock(
            quote!(name = "{{x}}_{id}", lock_at_most_for = "1h"),
            quote!(
                pub async fn job(id: u64) -> Result<(), String> {
                    Ok(())
                }
            ),
        );
        assert!(out.contains(r#"format ! ("{{x}}_{}" , id)"#), "{out}");
        assert!(out.contains("Duration :: new (3600u64 , 0u32)"), "{out}");
        assert!(
            out.contains("TaskResult < Result < () , String > >"),
            "{out}"
        );
        assert!(out.starts_with("pub async fn job (id : u64)"), "{out}");
    }

    #[test]
    fn inner_attributes_stay_inside_the_body() {
        let out = expand_lock(
            quote!(name = "a", lock_at_most_for = "1h"),
            quote!(
                #[inline]
                async fn job() {
                    #![allow(unused)]
                }
            ),
        );
        assert!(out.starts_with("# [inline] async fn job ()"), "{out}");
        assert!(
            out.contains("{ # ! [allow (unused)] let __shedlock_name"),
            "{out}"
        );
    }

    #[test]
    fn an_expression_is_evaluated_before_the_body_captures_the_parameters() {
        let out = expand_lock(
            quote!(
                name = "a_{id}",
                lock_at_most_for = ctx.lock_at_most_for,
                lock_at_least_for = "1s"
            ),
            quote!(
                async fn job(id: u64, ctx: &Settings) {}
            ),
        );
        let binding = "let __shedlock_lock_at_most_for : :: shedlock :: __private :: Duration = \
                       ctx . lock_at_most_for ;";
        let at = |needle: &str| {
            out.find(needle)
                .unwrap_or_else(|| panic!("{needle}: {out}"))
        };
        assert!(at("let __shedlock_name") < at(binding), "{out}");
        assert!(at(binding) < at("async move"), "{out}");
        assert!(
            out.contains(
                "run_locked (__shedlock_name , __shedlock_lock_at_most_for , \
                 :: shedlock :: __private :: Duration :: new (1u64 , 0u32) ,"
            ),
            "{out}"
        );
        assert!(!out.contains("__shedlock_lock_at_least_for"), "{out}");
    }

    #[test]
    fn impl_trait_output_is_inferred() {
        let out = expand_lock(
            quote!(name = "a", lock_at_most_for = "1h"),
            quote!(
                async fn job() -> impl std::fmt::Display {
                    1
                }
            ),
        );
        assert!(out.contains("body :: < _ , _ >"), "{out}");
    }

    #[test]
    fn the_1000_year_limit_is_exact() {
        let out = expand_lock(
            quote!(name = "a", lock_at_most_for = "P365000D"),
            quote!(
                async fn job() {}
            ),
        );
        assert!(
            out.contains("Duration :: new (31536000000u64 , 0u32)"),
            "{out}"
        );
    }

    #[test]
    fn scheduled_adds_a_job_constructor() {
        let scheduled_fn = ScheduledFn::parse(
            quote!(cron = "0 */5 * * * *", time_zone = "Europe/Berlin"),
            quote!(
                #[scheduler_lock(name = "a", lock_at_most_for = "1m")]
                pub(crate) async fn sync<T: Clone, const N: usize>(id: u64, t: T) {}
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let out = scheduled(scheduled_fn).to_string();
        assert!(out.contains("pub (crate) enum sync { }"), "{out}");
        assert!(
            out.contains("pub (crate) fn job < T : Clone , const N : usize > (id : u64 , t : T)"),
            "{out}"
        );
        // The lock is declared: each run hands its claim to the hidden sibling, and the
        // function itself calls the sibling with none.
        assert!(
            out.contains(
                "__shedlock_claimed_sync :: < T , N > (__shedlock_claim , id , t) . await"
            ),
            "{out}"
        );
        assert!(
            out.contains("__shedlock_claimed_sync :: < T , N > (:: shedlock :: __private :: Claim :: none () , id , t) . await"),
            "{out}"
        );
        assert!(
            out.contains(":: shedlock :: __private :: claimed_job ("),
            "{out}"
        );
        assert!(
            out.contains(r#""0 */5 * * * *" , "Europe/Berlin""#),
            "{out}"
        );
    }
}
