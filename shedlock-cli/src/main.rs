//! The `shedlock` command-line tool: see the `shedlock_cli` library.

fn main() -> std::process::ExitCode {
    shedlock_cli::main()
}
