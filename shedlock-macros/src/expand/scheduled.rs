//! The code `#[scheduled]` generates: the function's `job()`, and with a lock known at compile
//! time the hidden sibling that takes each run's claim as an argument.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::*;
use crate::scheduled::ScheduledFn;

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
        interval,
        declared_lock,
        lock_invalid,
        overlap,
        pause_after_failures,
        time_rules,
        deadlines,
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
    // `job(…)` takes every parameter but the `Interval` one, which each run fills with the
    // span it covers; the calls pass every parameter in its place.
    let taken: Vec<_> = params
        .iter()
        .enumerate()
        .filter(|(at, _)| Some(*at) != interval)
        .map(|(_, param)| param)
        .collect();
    let names: Vec<_> = taken.iter().map(|(name, _)| name).collect();
    let types: Vec<_> = taken.iter().map(|(_, ty)| ty).collect();
    let args: Vec<TokenStream> = params
        .iter()
        .enumerate()
        .map(|(at, (name, _))| match Some(at) == interval {
            true => quote!(::shedlock::__private::run_interval()),
            false => name.to_token_stream(),
        })
        .collect();
    // A parameter type that is not `Clone` is reported on that type.
    let clones = taken.iter().map(
        |(name, ty)| quote_spanned!(ty.span()=> let #name = ::core::clone::Clone::clone(&#name);),
    );

    // The call carries the output type's span, so an output that is not a `JobOutput` is
    // reported on the function's return type.
    let output_span = match &func.sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => Span::call_site(),
    };
    // A lock named per parameter (`report_{region}`) names the job too, filled in the same
    // way, so `report::job("eu")` and `report::job("us")` are two jobs (`report_eu`,
    // `report_us`) that the store, the tool and the dashboard know by those names.
    let per_parameter_name = declared_lock
        .as_ref()
        .filter(|locked| {
            locked
                .name
                .pieces
                .iter()
                .any(|piece| matches!(piece, crate::scheduler_lock::NamePiece::Param(_)))
        })
        .map(|locked| name_expr(&locked.name));
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
            let every: Vec<_> = params.iter().map(|(name, _)| name).collect();
            let wrapper = claiming_wrapper(outer, &sibling_ident, &turbofish, &every);
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
                    async move { #sibling_ident #turbofish (#claim, #(#args),*).await }
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
                &args,
                clones,
                output_span,
            ),
        ),
    };
    let job = match per_parameter_name {
        // The `#[scheduler_lock]` reports its own error; this body never compiles into a
        // program, and calls nothing whose type that error left unknown.
        _ if lock_invalid => quote! {
            #(let _ = &#names;)*
            let _ = #ident #turbofish;
            ::core::unreachable!("`#[scheduler_lock]` on this function did not expand")
        },
        Some(name) => {
            let job_name = syn::Ident::new("__shedlock_job_name", Span::mixed_site());
            quote! {
                let #job_name: ::std::string::String = #name;
                let __shedlock_job: ::shedlock::Job = { #job };
                __shedlock_job.named(#job_name)
            }
        }
        None => job,
    };
    let job = match overlap_expr(overlap) {
        Some(policy) => quote! {
            let __shedlock_job: ::shedlock::Job = { #job };
            __shedlock_job.overlap(#policy)
        },
        None => job,
    };
    let job = match pause_after_failures {
        Some(failures) => quote! {
            let __shedlock_job: ::shedlock::Job = { #job };
            __shedlock_job.pause_after_failures(#failures)
        },
        None => job,
    };
    let job = match deadline_calls(&deadlines) {
        Some(calls) => quote! {
            let __shedlock_job: ::shedlock::Job = { #job };
            __shedlock_job.deadlines(::shedlock::schedules::Deadlines::default() #calls)
        },
        None => job,
    };
    let job = match time_rules_calls(&time_rules) {
        Some(calls) => quote! {
            let __shedlock_job: ::shedlock::Job = { #job };
            __shedlock_job #calls
        },
        None => job,
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
    args: &[TokenStream],
    clones: impl Iterator<Item = TokenStream>,
    output_span: Span,
) -> TokenStream {
    let run = quote! {
        move || {
            #(#clones)*
            async move { #ident #turbofish (#(#args),*).await }
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

/// The `shedlock::Overlap` a `#[scheduled(overlap = …)]` gave, as an expression; `None` for
/// `skip` (the default, which `job()` leaves as it is).
fn overlap_expr(overlap: crate::overlap::Overlap) -> Option<TokenStream> {
    use crate::overlap::{Overlap, WhenFull};
    Some(match overlap {
        Overlap::Skip => return None,
        Overlap::BufferOne => quote!(::shedlock::Overlap::BufferOne),
        Overlap::BufferAll { limit } => quote!(::shedlock::Overlap::BufferAll { limit: #limit }),
        Overlap::CancelOther => quote!(::shedlock::Overlap::CancelOther),
        Overlap::AllowAll {
            max_running,
            when_full,
        } => {
            let when_full = match when_full {
                WhenFull::Skip => quote!(::shedlock::scheduler::WhenFull::Skip),
                WhenFull::BufferOne => quote!(::shedlock::scheduler::WhenFull::BufferOne),
            };
            quote!(::shedlock::Overlap::AllowAll { max_running: #max_running, when_full: #when_full })
        }
    })
}

/// The `Deadlines` builder calls a `#[scheduled]` function's deadlines make, if any.
fn deadline_calls(deadlines: &crate::scheduled::Deadlines) -> Option<TokenStream> {
    let duration = |d: std::time::Duration| {
        let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
        quote!(::core::time::Duration::new(#secs, #nanos))
    };
    let mut calls = TokenStream::new();
    if let Some(d) = deadlines.expect_success_within {
        let d = duration(d);
        calls.extend(quote!(.expect_success_within(#d)));
    }
    if let Some(d) = deadlines.max_runtime {
        let d = duration(d);
        calls.extend(quote!(.max_runtime(#d)));
    }
    if let Some(d) = deadlines.late_after {
        let d = duration(d);
        calls.extend(quote!(.late_after(#d)));
    }
    if let Some(n) = deadlines.failures_in_a_row {
        calls.extend(quote!(.failures_in_a_row(#n)));
    }
    if let Some(d) = deadlines.paused_longer_than {
        let d = duration(d);
        calls.extend(quote!(.paused_longer_than(#d)));
    }
    if deadlines.cancel_overrun {
        calls.extend(quote!(.cancel_overrun()));
    }
    (!calls.is_empty()).then_some(calls)
}

/// The `Job` builder calls a `#[scheduled]` function's time rules make (`.exclude("kr")`
/// per calendar, `.on_excluded(…)`, `.starting_at(…)`, `.ending_at(…)`, `.max_runs(…)`);
/// `None` when it gives none. Each instant is its seconds and nanoseconds since the epoch,
/// read at compile time, so nothing is parsed at run time.
fn time_rules_calls(rules: &crate::time_rules::TimeRules) -> Option<TokenStream> {
    use proc_macro2::Literal;
    if rules.is_empty() {
        return None;
    }
    let instant = |at: chrono::DateTime<chrono::Utc>| {
        let secs = Literal::i64_suffixed(at.timestamp());
        let nanos = Literal::u32_suffixed(at.timestamp_subsec_nanos());
        quote!(::shedlock::__private::instant(#secs, #nanos))
    };
    let exclude = rules.exclude.iter().map(|name| quote!(.exclude(#name)));
    let on_excluded = rules.on_excluded.map(|variant| {
        let variant = syn::Ident::new(variant, Span::call_site());
        quote!(.on_excluded(::shedlock::schedules::OnExcluded::#variant))
    });
    let start = rules.start.map(|at| {
        let at = instant(at);
        quote!(.starting_at(#at))
    });
    let end = rules.end.map(|at| {
        let at = instant(at);
        quote!(.ending_at(#at))
    });
    let max_runs = rules.max_runs.map(|runs| {
        let runs = Literal::u32_suffixed(runs);
        quote!(.max_runs(#runs))
    });
    Some(quote!(#(#exclude)* #on_excluded #start #end #max_runs))
}
