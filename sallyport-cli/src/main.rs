//! The `sallyport` binary. See the `sallyport_cli` library for the commands.

fn main() -> std::process::ExitCode {
    sallyport_cli::main()
}
