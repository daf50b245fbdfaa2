//! What both command-line tools share: the trace input arguments, errors
//! with their exit status, output that tolerates a closed pipe, and `main`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use embtier_sim::trace::{import, CsvSpec, Format, Trace};

/// A failure: exit status (2 usage, 1 data) and a one-line message.
#[derive(Debug)]
pub struct Fail(pub u8, pub String);

/// A data error (exit status 1).
pub fn data(e: impl std::fmt::Display) -> Fail {
    Fail(1, e.to_string())
}

/// A usage error (exit status 2).
pub fn usage(e: impl std::fmt::Display) -> Fail {
    Fail(2, e.to_string())
}

/// The trace arguments of every subcommand that reads a trace.
#[derive(clap::Args, Clone, Debug)]
pub struct Input {
    /// The trace file.
    pub trace: PathBuf,
    /// Input format: auto, etrace, oracle-general, csv, txt, criteo, movielens.
    #[arg(long, default_value = "auto", value_parser = |s: &str| s.parse::<Format>())]
    pub format: Format,
    /// Column spec for csv: id=COL[,table=COL][,header=yes|no][,delim=C|tab].
    #[arg(long, default_value = "id=0", value_parser = |s: &str| s.parse::<CsvSpec>())]
    pub columns: CsvSpec,
    /// Accesses per batch (samples per batch for criteo and movielens).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch_size: u64,
}

/// Read the input, with a spinner on a terminal; says which format `auto` chose.
pub fn load(input: &Input) -> Result<Trace, Fail> {
    let spinner = progress(&format!("reading {}", input.trace.display()));
    let (t, f) = import(
        &input.trace,
        input.format,
        &input.columns,
        input.batch_size as usize,
    )
    .map_err(data)?;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    if input.format == Format::Auto {
        eprintln!("{}: read as {}", input.trace.display(), f.name());
    }
    Ok(t)
}

/// A spinner on stderr, or nothing when stderr is not a terminal.
pub fn progress(msg: &str) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let s = indicatif::ProgressBar::new_spinner();
    s.set_message(msg.to_string());
    s.enable_steady_tick(std::time::Duration::from_millis(120));
    Some(s)
}

/// Write the output; a closed pipe (`| head`) is a normal end, not an error.
pub fn emit(o: &str) -> Result<(), Fail> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(o.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(data(format!("stdout: {e}"))),
        _ => Ok(()),
    }
}

/// Parse the command line and run: usage errors exit 2 (clap's message),
/// failures print `NAME: error: MESSAGE` and exit with their status.
pub fn main_with<C: clap::Parser>(name: &str, run: impl FnOnce(C) -> Result<(), Fail>) -> ExitCode {
    let cli = match C::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(code, msg)) => {
            eprintln!("{name}: error: {}", one_line(&msg));
            ExitCode::from(code)
        }
    }
}

/// A message on one line: the lines of a multi-line error (a TOML parse
/// error's source excerpt and caret, which only repeat the line and column
/// it names) dropped, the rest joined with `: `.
pub fn one_line(msg: &str) -> String {
    let excerpt = |l: &str| {
        l.trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ')
            .starts_with('|')
    };
    let parts: Vec<&str> = msg
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !excerpt(l))
        .collect();
    parts.join(": ")
}
