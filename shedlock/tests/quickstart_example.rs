//! The Quick start example builds the library alone (issue 47: `cargo run --example quickstart`
//! took 6 min 37 s, as an example of the root package, which builds every test dependency of
//! the workspace). It is an example of the library's package, and what it compiles is read from
//! `cargo tree` (`--offline`: the registry cache has every package).
#![allow(missing_docs)]

use std::collections::BTreeSet;
use std::process::Command;

/// The most packages `cargo run -p shedlock --example quickstart --features sqlite` may compile
/// (136 when this test was written; the root package's examples compile 328).
const MAX_PACKAGES: usize = 150;

fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_quickstart_example_builds_the_library_alone() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .expect("the library's manifest");
    assert!(
        manifest.contains("[[example]]\nname = \"quickstart\"")
            && std::path::Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/examples/quickstart.rs"
            ))
            .exists(),
        "the quickstart example is the library's"
    );
    let tree = cargo(&[
        "tree",
        "--offline",
        "-p",
        "shedlock",
        "--features",
        "sqlite,macros",
        "-e",
        "normal,build,dev",
        "--prefix",
        "none",
    ]);
    let packages: BTreeSet<String> = tree
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some(format!("{} {}", words.next()?, words.next()?))
        })
        .collect();
    assert!(
        packages.len() <= MAX_PACKAGES,
        "cargo run -p shedlock --example quickstart --features sqlite compiles {} packages",
        packages.len()
    );
}
