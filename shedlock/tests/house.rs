//! The house a newcomer reads (issue 47, point 5): each folder of the scheduler says, in its
//! `mod.rs`, what each of its files does, and the control plane lives in one folder.
#![allow(missing_docs)]

use std::path::Path;

/// The `//!` lines of a module file.
fn module_doc(file: &Path) -> String {
    std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The files and folders of `dir` its `mod.rs` does not name in its module doc (as `name.rs`
/// or `name/`, in backticks).
fn unnamed(dir: &Path) -> Vec<String> {
    let doc = module_doc(&dir.join("mod.rs"));
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let shown = if entry.file_type().unwrap().is_dir() {
            format!("`{name}/`")
        } else if name.ends_with(".rs") {
            format!("`{name}`")
        } else {
            continue;
        };
        if !doc.contains(&shown) {
            missing.push(shown);
        }
    }
    missing.sort();
    missing
}

#[test]
fn the_schedulers_folders_say_what_each_file_does() {
    let scheduler = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/scheduler");
    for dir in [
        scheduler.clone(),
        scheduler.join("control"),
        scheduler.join("overlap"),
    ] {
        let missing = unnamed(&dir);
        assert!(
            missing.is_empty(),
            "{}/mod.rs does not say what these do: {missing:?}",
            dir.display()
        );
    }
}

#[test]
fn the_control_plane_lives_in_one_folder() {
    let scheduler = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/scheduler");
    let mut folders: Vec<String> = std::fs::read_dir(&scheduler)
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_type().unwrap().is_dir())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    folders.sort();
    // The control plane in `control/`; the overlap policies (the rows they keep) in
    // `overlap/`, which the control plane does not reach into.
    assert_eq!(folders, ["control", "overlap"], "the scheduler's folders");
    assert!(
        !scheduler.join("metric_names.rs").exists(),
        "the metric names are the library's, not the scheduler's"
    );
}
