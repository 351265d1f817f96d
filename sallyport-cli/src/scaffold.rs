//! `sallyport scaffold`: writes a Rust module of actions from operations of an OpenAPI
//! document ([`sallyport_scaffold`]), leaving effect, consent and retry to the author.

use std::io::Write as _;
use std::path::PathBuf;

use clap::Args;
use sallyport_openapi::OpenApi;

use crate::exit::{Exit, Failure};

/// `scaffold` options.
#[derive(Debug, Args)]
#[non_exhaustive]
pub struct ScaffoldArgs {
    /// The OpenAPI 3.0 or 3.1 document (JSON or YAML).
    #[arg(long, value_name = "FILE")]
    pub openapi: PathBuf,
    /// An operation to generate, by its operationId (repeatable).
    #[arg(long = "operation", value_name = "ID", required = true)]
    pub operations: Vec<String>,
    /// Write the module to this file instead of standard output (refuses an existing file
    /// unless --force: it may hold the decisions you made).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Replace an existing --out file.
    #[arg(long, requires = "out")]
    pub force: bool,
    /// Bind every action to this vault credential, whatever the document's security
    /// requirements say (for a document that declares none).
    #[arg(long, value_name = "NAME")]
    pub credential: Option<String>,
}

/// Generates the module; prints each operation it could not generate (with the reason) and
/// each decision left open to standard error. Exits [`Exit::NothingGenerated`] when no
/// operation could be generated.
pub(crate) fn run(args: &ScaffoldArgs) -> Result<(), Failure> {
    let text = std::fs::read_to_string(&args.openapi).map_err(|e| {
        let exit = if e.kind() == std::io::ErrorKind::NotFound {
            Exit::NotFound
        } else {
            Exit::Failure
        };
        Failure::new(exit, format!("cannot read {}: {e}", args.openapi.display()))
    })?;
    let api = OpenApi::parse(&text).map_err(|e| Failure::new(Exit::Usage, e.to_string()))?;
    let mut scaffold = sallyport_scaffold::Scaffold::new(&api).operations(&args.operations);
    if let Some(name) = &args.credential {
        scaffold = scaffold.credential(name);
    }
    let generated = scaffold.generate();
    for unsupported in &generated.unsupported {
        eprintln!(
            "sallyport scaffold: not generated: {}",
            sallyport_core::consent::escape(&unsupported.to_string())
        );
    }
    if generated.actions.is_empty() {
        return Err(Failure::new(
            Exit::NothingGenerated,
            "none of the operations could be generated",
        ));
    }
    match &args.out {
        Some(path) => {
            let mut options = std::fs::OpenOptions::new();
            options.write(true);
            if args.force {
                options.create(true).truncate(true);
            } else {
                options.create_new(true);
            }
            let mut file = options.open(path).map_err(|e| {
                let exit = if e.kind() == std::io::ErrorKind::AlreadyExists {
                    Exit::AlreadyExists
                } else {
                    Exit::Failure
                };
                Failure::new(
                    exit,
                    format!(
                        "cannot write {}: {e} (it may hold decisions you made; --force replaces it)",
                        path.display()
                    ),
                )
            })?;
            file.write_all(generated.code.as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| {
                    Failure::new(
                        Exit::Failure,
                        format!("cannot write {}: {e}", path.display()),
                    )
                })?;
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(generated.code.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| {
                    Failure::new(Exit::Failure, format!("cannot write the module: {e}"))
                })?;
        }
    }
    for action in &generated.actions {
        if !action.open_decisions.is_empty() {
            let open: Vec<&str> = action.open_decisions.iter().map(|d| d.as_str()).collect();
            eprintln!(
                "sallyport scaffold: {} ({}): choose {} (it does not compile until you do)",
                action.action,
                sallyport_core::consent::escape(&action.operation_id),
                open.join(", ")
            );
        }
    }
    Ok(())
}
