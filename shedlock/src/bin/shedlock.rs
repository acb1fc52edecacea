//! The `shedlock` command-line tool: see [`shedlock::cli`].

fn main() -> std::process::ExitCode {
    shedlock::cli::main()
}
