//! The crate root stays small: what a user of the README writes is there, every other name is
//! in the module of its topic (`shedlock::settings`, `shedlock::history`, `shedlock::scheduler`,
//! ...), so the root's page of rustdoc fits one screen. A name added to the root past the limits
//! below fails here; put it in its module, or raise a limit with a reason.
#![allow(missing_docs)]

/// Names at the root that are not modules (types, traits, functions, type aliases, macros).
const MAX_ROOT_ITEMS: usize = 25;
/// Public modules at the root (`#[doc(hidden)]` ones not counted). 13 since `operator` (issue 47:
/// the operator's actions, written once for the CLI, the dashboard and the API, are a topic of
/// their own, next to `schedules` and `history` which they act on); 14 since `metric_names`
/// left `scheduler` (issue 47: the lock guard, leader election and the clock check record
/// metrics too, and reached up into the scheduler's folder for their names).
const MAX_ROOT_MODULES: usize = 14;

/// The public names `lib.rs` puts at the root, split into (items, modules), as its text
/// declares them: the names of each top-level `pub use`, and each top-level `pub mod`,
/// `pub type`, `pub fn`, `pub struct`, `pub enum`, `pub trait`, `pub const`, `pub static` and
/// `macro_rules!` with `#[macro_export]`; an item under `#[doc(hidden)]` is not shown, and not
/// counted.
fn root_names(lib: &str) -> (Vec<String>, Vec<String>) {
    let (mut items, mut modules) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    let mut hidden = false;
    let mut statement = String::new();
    for line in lib.lines() {
        let code = line.split("//").next().unwrap_or("").trim();
        let at_top = depth == 0;
        if at_top && code.starts_with("#[doc(hidden)]") {
            hidden = true;
        }
        if at_top && (code.starts_with("pub use ") || !statement.is_empty()) {
            statement.push_str(code);
            statement.push(' ');
            if code.ends_with(';') {
                if !hidden {
                    items.extend(used_names(&statement));
                }
                statement.clear();
                hidden = false;
            }
            continue;
        }
        if at_top {
            let words: Vec<&str> = code.split([' ', '(', '<', ':', ';', '{']).collect();
            if let ["pub", kind, name, ..] = words.as_slice() {
                let name = name.to_string();
                match *kind {
                    _ if hidden => {}
                    "mod" => modules.push(name),
                    "type" | "fn" | "struct" | "enum" | "trait" | "const" | "static" => {
                        items.push(name)
                    }
                    _ => {}
                }
                hidden = false;
            }
            if code.starts_with("macro_rules!") && lib.contains("#[macro_export]") {
                items.push(code.to_owned());
            }
        }
        depth += code.matches('{').count();
        depth -= code.matches('}').count().min(depth);
    }
    (items, modules)
}

/// The names a `pub use path::{A, B as C, d::E};` statement brings in (`C` and `E`, not `B`).
fn used_names(statement: &str) -> Vec<String> {
    let body = statement
        .trim()
        .trim_start_matches("pub use ")
        .trim_end_matches([';', ' ']);
    let list = match (body.find('{'), body.rfind('}')) {
        (Some(open), Some(close)) => body[open + 1..close].to_owned(),
        _ => body.to_owned(),
    };
    list.split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| {
            let name = name.rsplit(" as ").next().unwrap_or(name);
            name.rsplit("::").next().unwrap_or(name).trim().to_owned()
        })
        .collect()
}

#[test]
fn the_root_fits_one_screen() {
    let lib = include_str!("../src/lib.rs");
    let (items, modules) = root_names(lib);
    assert!(
        items.len() <= MAX_ROOT_ITEMS,
        "{} names at the root, the limit is {MAX_ROOT_ITEMS}: {items:?}",
        items.len()
    );
    assert!(
        modules.len() <= MAX_ROOT_MODULES,
        "{} modules at the root, the limit is {MAX_ROOT_MODULES}: {modules:?}",
        modules.len()
    );
    // The count reads what it should: the README's names are among them.
    for name in [
        "LockConfiguration",
        "Scheduler",
        "scheduler_lock",
        "PostgresLockProvider",
    ] {
        assert!(items.iter().any(|item| item == name), "{name} in {items:?}");
    }
    for module in ["settings", "history", "scheduler", "lease", "dialect"] {
        assert!(
            modules.iter().any(|m| m == module),
            "{module} in {modules:?}"
        );
    }
    assert!(
        !modules.iter().any(|m| m == "__private"),
        "hidden: not counted"
    );
}

/// Every name the README's code imports from `shedlock::` directly (its Quick start's
/// `use shedlock::{…};` lines) is at the root.
#[test]
fn the_readme_imports_from_the_root() {
    let (items, _) = root_names(include_str!("../src/lib.rs"));
    let readme = include_str!("../../README.md");
    let mut checked = 0;
    for line in readme.lines() {
        let Some(rest) = line.trim().strip_prefix("use shedlock::") else {
            continue;
        };
        for name in used_names(&format!("pub use x::{rest}")) {
            assert!(
                items.contains(&name),
                "the README imports shedlock::{name}, which is not at the root: {items:?}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 5, "the README's imports were read: {checked}");
}

/// The counting itself, on a made-up `lib.rs`.
#[test]
fn the_count_reads_uses_modules_and_items() {
    let lib = "\
//! docs {with braces}
mod private;
pub mod shown;
#[doc(hidden)]
pub mod hidden;
pub use a::{B, C as D,
    e::F};
pub use g::H;
#[cfg(feature = \"x\")]
pub type Alias = B;
pub mod inline {
    pub use crate::a::Inner;
    pub fn not_at_root() {}
}
pub fn at_root() {}
";
    let (items, modules) = root_names(lib);
    assert_eq!(items, ["B", "D", "F", "H", "Alias", "at_root"]);
    assert_eq!(modules, ["shown", "inline"]);
}

/// What the README writes stays at the root (this file does not compile otherwise).
#[allow(unused_imports)]
mod the_readme_names_stay_at_the_root {
    #[cfg(feature = "postgres")]
    use shedlock::PostgresLockProvider;
    use shedlock::{
        Error, Job, LockConfiguration, LockContext, LockGuard, LockProvider, LockingTaskExecutor,
        Result, Schedule, Scheduler, TaskResult, run_locked, set_default_provider, with_provider,
    };
    #[cfg(feature = "macros")]
    use shedlock::{scheduled, scheduler_lock};
}
