//! The `sallyport` command, built inside the test package so the CLI tests can run it as a real
//! process (`CARGO_BIN_EXE_sallyport-under-test`). Same code as the `sallyport` binary.

fn main() -> std::process::ExitCode {
    sallyport_cli::main()
}
