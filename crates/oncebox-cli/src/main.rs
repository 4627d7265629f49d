//! The `oncebox` binary; the commands live in the library.

fn main() -> std::process::ExitCode {
    oncebox_cli::main()
}
