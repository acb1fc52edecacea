//! The check that the suites' case lists cannot drift from their cases: every topic file under
//! `src/suite/`, `src/scheduler_suite/` and `src/control_suite/` lists each of its cases (a
//! `pub async fn name<D: …>`) once in its own `macro_rules! __kit_…`, `every` store's bounded by
//! `TestDb` and the `sql` ones by `SqlTestDb`; and every list is called by a suite macro.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const SUITES: [&str; 3] = ["suite", "scheduler_suite", "control_suite"];

/// Every `.rs` file under `dir`, recursively, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The cases of a file: `(name, bound)` of each `pub async fn name<D: bound>`.
fn cases(source: &str) -> Vec<(String, String)> {
    source
        .split("pub async fn ")
        .skip(1)
        .filter_map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let bound = rest[name.len()..].strip_prefix("<D: ")?;
            let bound: String = bound
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            Some((name, bound))
        })
        .collect()
}

/// The names listed in one arm of a case list: lines that are an identifier and a comma.
fn listed(arm: &str) -> Vec<String> {
    arm.lines()
        .map(str::trim)
        .filter_map(|line| line.strip_suffix(','))
        .filter(|name| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_case_is_listed_once() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut all = BTreeSet::new();
    for suite in SUITES {
        for path in sources(&src.join(suite)) {
            let source = std::fs::read_to_string(&path).unwrap();
            let cases = cases(&source);
            let file = path.strip_prefix(&src).unwrap().display().to_string();
            let Some(macro_at) = source.find("macro_rules! __kit_") else {
                assert!(cases.is_empty(), "{file} has cases and no case list");
                continue;
            };
            let lists = &source[macro_at..];
            let name: String = lists["macro_rules! ".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let expected = format!("__kit_{}", file.trim_end_matches(".rs").replace('/', "_"));
            assert_eq!(name, expected, "{file}: its list is named after its path");
            let every_at = lists.find("(every $db:ty) =>").expect("an `every` arm");
            let sql_at = lists.find("(sql $db:ty) =>").expect("an `sql` arm");
            assert!(every_at < sql_at, "{file}: `every`, then `sql`");
            let every = listed(&lists[every_at..sql_at]);
            let sql = listed(&lists[sql_at..]);
            for (arm, names) in [("every", &every), ("sql", &sql)] {
                if !names.is_empty() {
                    assert!(
                        lib.contains(&format!("$crate::{name}!({arm} $db);")),
                        "{file}: no suite macro in lib.rs calls its `{arm}` list"
                    );
                }
            }
            let mut in_lists = BTreeSet::new();
            for listed_name in every.iter().chain(&sql) {
                assert!(
                    in_lists.insert(listed_name.clone()),
                    "{file}: {listed_name} is listed twice"
                );
            }
            for (case, bound) in &cases {
                let want = if every.contains(case) {
                    "TestDb"
                } else if sql.contains(case) {
                    "SqlTestDb"
                } else {
                    panic!("{file}: case {case} is in no list of its file");
                };
                assert_eq!(
                    bound, want,
                    "{file}: {case} is to be bounded by {want}, as its list says"
                );
                assert!(all.insert(case.clone()), "{case} is a case twice");
            }
            let defined: BTreeSet<_> = cases.iter().map(|(case, _)| case.clone()).collect();
            let stray: Vec<_> = in_lists.difference(&defined).collect();
            assert!(
                stray.is_empty(),
                "{file} lists what it does not define: {stray:?}"
            );
        }
    }
    // The suites' 105 cases at the time of writing: a parser that found none would pass the
    // checks above.
    assert!(all.len() >= 105, "found {} cases", all.len());
}
