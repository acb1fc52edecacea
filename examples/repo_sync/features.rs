//! The parts of repo_sync that are cargo features (see `Cargo.toml`), and how a command that asks
//! for one this build leaves out is refused: before anything opens, naming what asked for it,
//! the feature, and the command that runs the same thing with it built in.
//!
//! | feature | what it builds in | asked for by |
//! |---|---|---|
//! | `postgres` | PostgreSQL as the database | `--database-url postgres://…` |
//! | `workers` | worker mode (apalis queues) | `run --role scheduler`, `run --role worker` |
//! | `http` | the HTTP embedder, GitLab projects as sources | `--embedder-url`, `add https://…`, syncing a GitLab registration |
//! | `metrics` | the Prometheus endpoint | `run --metrics-addr` |
//! | `dashboard` | the dashboard (`shedlock-web`) | `run --dashboard` |
//! | `minilm` | all-MiniLM-L6-v2 in the process | `--embedder minilm` |

use std::fmt;

/// A part of repo_sync behind a cargo feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Feature {
    Postgres,
    Workers,
    Http,
    Metrics,
    Dashboard,
    Minilm,
}

impl Feature {
    /// Every feature, in the order `--features` lists them.
    pub(crate) const ALL: [Feature; 6] = [
        Feature::Postgres,
        Feature::Workers,
        Feature::Http,
        Feature::Metrics,
        Feature::Dashboard,
        Feature::Minilm,
    ];

    /// The cargo feature's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Feature::Postgres => "postgres",
            Feature::Workers => "workers",
            Feature::Http => "http",
            Feature::Metrics => "metrics",
            Feature::Dashboard => "dashboard",
            Feature::Minilm => "minilm",
        }
    }

    /// What the feature builds in, for the messages.
    fn part(self) -> &'static str {
        match self {
            Feature::Postgres => "PostgreSQL",
            Feature::Workers => "worker mode",
            Feature::Http => "the HTTP clients (embeddings server, GitLab)",
            Feature::Metrics => "the Prometheus endpoint",
            Feature::Dashboard => "the dashboard",
            Feature::Minilm => "all-MiniLM-L6-v2 in the process",
        }
    }

    /// Whether this build has it.
    pub(crate) fn built_in(self) -> bool {
        match self {
            Feature::Postgres => cfg!(feature = "postgres"),
            Feature::Workers => cfg!(feature = "workers"),
            Feature::Http => cfg!(feature = "http"),
            Feature::Metrics => cfg!(feature = "metrics"),
            Feature::Dashboard => cfg!(feature = "dashboard"),
            Feature::Minilm => cfg!(feature = "minilm"),
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The features of this build.
pub(crate) fn built_in() -> Vec<Feature> {
    Feature::ALL.into_iter().filter(|f| f.built_in()).collect()
}

/// `cargo run -p repo_sync`, with `--features` naming `features` (none: the default build).
pub(crate) fn cargo_run(features: &[Feature]) -> String {
    let mut features = features.to_vec();
    features.sort();
    features.dedup();
    if features.is_empty() {
        return "cargo run -p repo_sync".to_owned();
    }
    let names: Vec<&str> = features.iter().map(|f| f.name()).collect();
    format!("cargo run -p repo_sync --features {}", names.join(","))
}

/// The command that runs this build's way, as a hint: `cargo run -p repo_sync` with this
/// build's features.
pub(crate) fn this_build() -> String {
    cargo_run(&built_in())
}

/// The error where a part this build leaves out would run: the command line is refused before
/// anything opens ([`refusal`]); this is for what that check cannot see, such as a stored
/// registration of a GitLab project synced by a build without `http`.
#[cfg(not(all(
    feature = "postgres",
    feature = "workers",
    feature = "http",
    feature = "metrics",
    feature = "minilm"
)))]
pub(crate) fn not_built(feature: Feature) -> String {
    let mut features = built_in();
    features.push(feature);
    format!(
        "{} is not built into this repo_sync (the `{feature}` feature): run it with `{}`",
        feature.part(),
        cargo_run(&features)
    )
}

/// What a command asks for that this build leaves out: the feature, and what asked for it
/// (`--database-url postgres://…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Missing {
    pub(crate) feature: Feature,
    pub(crate) asked_by: String,
}

impl Missing {
    pub(crate) fn new(feature: Feature, asked_by: impl Into<String>) -> Self {
        Missing {
            feature,
            asked_by: asked_by.into(),
        }
    }
}

/// The refusal of a command that asks for `missing` (at least one), run with `args` (the
/// command line's arguments after the program's name) in a build with the features `built`.
///
/// One line (the program prints its errors escaped, a line each): each part, what asked for it
/// and its feature, then, last, the command to run instead:
/// `cargo run -p repo_sync --features <built and missing> -- <args>`, each argument quoted for
/// a POSIX shell and shown with its secrets masked ([`shedlock::secret::mask_url`]; the message
/// says so when it masked one).
pub(crate) fn refusal(missing: &[Missing], built: &[Feature], args: &[String]) -> String {
    let mut reasons = Vec::new();
    for m in missing {
        reasons.push(format!(
            "{} ({}) needs the `{}` feature",
            m.feature.part(),
            m.asked_by,
            m.feature
        ));
    }
    let mut features = built.to_vec();
    features.extend(missing.iter().map(|m| m.feature));
    let mut masked = false;
    let shown: Vec<String> = args
        .iter()
        .map(|arg| {
            let (arg, hidden) = masked_arg(arg);
            masked |= hidden;
            shell_quoted(&arg)
        })
        .collect();
    let mut command = cargo_run(&features);
    if !shown.is_empty() {
        command.push_str(" -- ");
        command.push_str(&shown.join(" "));
    }
    let note = if masked {
        " (the secret in the URL is shown as ***: type it in)"
    } else {
        ""
    };
    let they = if missing.len() == 1 { "it" } else { "them" };
    format!(
        "this build leaves out what the command asks for: {}. Build {they} in and \
         run the same command with{note}: {command}",
        reasons.join("; ")
    )
}

/// `arg` with the secrets of a URL in it masked (`postgres://u:***@h/db`; the value of
/// `--database-url=…` too); whether anything was masked.
fn masked_arg(arg: &str) -> (String, bool) {
    let (prefix, value) = match arg.split_once('=') {
        Some((option, value)) if option.starts_with("--") => (format!("{option}="), value),
        _ => (String::new(), arg),
    };
    let masked = shedlock::secret::mask_url(value);
    if masked.contains(shedlock::secret::MASK) && masked != value {
        (format!("{prefix}{masked}"), true)
    } else {
        (arg.to_owned(), false)
    }
}

/// `arg` as a POSIX shell reads it back: as it is when made of characters the shell does not
/// act on, else in single quotes.
fn shell_quoted(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_refusal_names_the_feature_and_the_whole_command() {
        let message = refusal(
            &[Missing::new(
                Feature::Postgres,
                "--database-url postgres://…",
            )],
            &[],
            &args(&[
                "--database-url",
                "postgres://postgres@127.0.0.1/test",
                "status",
            ]),
        );
        assert!(
            message
                .contains("PostgreSQL (--database-url postgres://…) needs the `postgres` feature"),
            "{message}"
        );
        assert!(
            message.ends_with(
                ": cargo run -p repo_sync --features postgres -- --database-url postgres://postgres@127.0.0.1/test status"
            ),
            "{message}"
        );
        assert!(!message.contains("***"), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }

    #[test]
    fn the_command_keeps_this_builds_features_and_adds_every_missing_one() {
        let message = refusal(
            &[
                Missing::new(Feature::Workers, "run --role worker"),
                Missing::new(Feature::Postgres, "--database-url postgres://…"),
            ],
            &[Feature::Metrics, Feature::Http],
            &args(&["run", "--role", "worker"]),
        );
        assert!(message.contains("Build them in"), "{message}");
        assert!(
            message.ends_with(
                "cargo run -p repo_sync --features postgres,workers,http,metrics -- run --role worker"
            ),
            "{message}"
        );
    }

    #[test]
    fn secrets_are_masked_and_odd_arguments_quoted() {
        let message = refusal(
            &[Missing::new(
                Feature::Postgres,
                "--database-url postgres://…",
            )],
            &[],
            &args(&[
                "--database-url=postgres://app:hunter2@db/x",
                "add",
                "../it's here",
                "--cron",
                "0 */15 * * * *",
            ]),
        );
        assert!(!message.contains("hunter2"), "{message}");
        assert!(
            message.contains("(the secret in the URL is shown as ***: type it in)"),
            "{message}"
        );
        assert!(
            message.ends_with(
                r"-- '--database-url=postgres://app:***@db/x' add '../it'\''s here' --cron '0 */15 * * * *'"
            ),
            "{message}"
        );
        assert_eq!(shell_quoted(""), "''");
    }

    #[test]
    fn the_default_build_is_run_without_features() {
        assert_eq!(cargo_run(&[]), "cargo run -p repo_sync");
        assert_eq!(
            cargo_run(&[Feature::Http, Feature::Http]),
            "cargo run -p repo_sync --features http"
        );
    }
}
