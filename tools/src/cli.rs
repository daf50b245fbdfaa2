//! What both command-line tools share: the trace input arguments, errors
//! with their exit status, output that tolerates a closed pipe, and `main`.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use embtier_sim::profile::{self, DeviceProfile, Profiles, TierDevices};
use embtier_sim::trace::{
    import_noting, import_stream_ids, row_bytes_of, CsvSpec, Format, Note, Trace, TraceTable,
};

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
    /// Input format: auto, etrace, oracle-general, csv, txt, criteo, avazu,
    /// movielens.
    #[arg(long, default_value = "auto", value_parser = |s: &str| s.parse::<Format>())]
    pub format: Format,
    /// Column spec for csv: id=COL[,table=COL][,header=yes|no|auto][,delim=C|tab]
    /// (COL: a 0-based index or a header name; the header is detected by default).
    #[arg(long, default_value = "id=0", value_parser = |s: &str| s.parse::<CsvSpec>())]
    pub columns: CsvSpec,
    /// Accesses per batch (samples per batch for criteo, avazu and movielens).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch_size: u64,
}

/// How a report is printed: markdown tables (the default), JSON or CSV.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct Output {
    /// Print JSON (its fields: docs/replay.md and docs/locality.md).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV: the report's table, one header line.
    #[arg(long)]
    pub csv: bool,
}

/// Bytes per row where a trace does not say: the `--row-bytes` default.
pub const DEFAULT_ROW_BYTES: u64 = 256;

/// The mean bytes per access of `t` (rows of `default` bytes where the
/// trace does not say).
pub fn mean_row_bytes(t: &Trace, default: u64) -> u64 {
    let mut per_table = vec![0u64; t.tables.len()];
    if !all_one_size(&t.tables, default) {
        for a in &t.accesses {
            per_table[a.table as usize] += 1;
        }
    }
    mean_row_bytes_by_table(&t.tables, &per_table, default)
}

/// Whether the rows of `tables` are all one size.
fn all_one_size(tables: &[TraceTable], default: u64) -> bool {
    tables
        .iter()
        .all(|t| row_bytes_of(t, default) == tables.first().map_or(0, |f| row_bytes_of(f, default)))
}

/// The mean bytes per access over tables with `per_table` accesses each
/// (rows of `default` bytes where a table does not say).
pub fn mean_row_bytes_by_table(tables: &[TraceTable], per_table: &[u64], default: u64) -> u64 {
    // Rows all of one size (one table, or tables alike) need no counts.
    if let Some(first) = tables.first() {
        if all_one_size(tables, default) {
            return row_bytes_of(first, default).max(1);
        }
    }
    let total: u64 = tables
        .iter()
        .zip(per_table)
        .map(|(t, &n)| row_bytes_of(t, default) * n)
        .sum();
    (total / per_table.iter().sum::<u64>().max(1)).max(1)
}

/// Sampled accesses under which a sampled curve is called rough (both
/// tools warn; none sampled is an error).
pub const FEW_SAMPLED: u64 = 1000;

/// Cache sizes in rows from `--sizes`: rows (`1000`), bytes (`64MiB`, a
/// unit suffix, at `row_bytes` a row), or `auto` (16 log-spaced sizes up to
/// the `unique` rows). A size beyond the unique rows gets a note.
pub fn parse_sizes(spec: &[String], unique: u64, row_bytes: u64) -> Result<Vec<u64>, Fail> {
    if spec.len() == 1 && spec[0].trim() == "auto" {
        let mut v: Vec<u64> = (0..16)
            .map(|i| ((unique.max(2) as f64).powf((i + 1) as f64 / 16.0)).round() as u64)
            .collect();
        v.dedup();
        return Ok(v);
    }
    let mut out = Vec::new();
    for s in spec {
        let t = s.trim();
        let rows =
            size_rows(t, row_bytes, "a cache").map_err(|e| usage(format!("--sizes: {e}")))?;
        if rows > unique {
            eprintln!("note: size {rows} exceeds the trace's {unique} unique rows: only cold misses remain");
        }
        out.push(rows);
    }
    Ok(out)
}

/// A cache's size in rows from its text (`what` names the cache in the
/// messages): rows (`1000`) or bytes (`64MiB`, at `row_bytes` a row),
/// at least one row and below 2^32.
pub fn size_rows(t: &str, row_bytes: u64, what: &str) -> Result<u64, String> {
    let t = t.trim();
    let rows = if t.chars().all(|c| c.is_ascii_digit()) && !t.is_empty() {
        t.parse::<u64>()
            .map_err(|_| format!("{t:?} is too large"))?
    } else if t.parse::<f64>().is_ok() {
        return Err(not_whole_rows(t));
    } else {
        let b = t
            .parse::<embtier::ByteSize>()
            .map_err(|e| format!("{e} (rows like 1000, bytes like 64MiB)"))?;
        b.0 / row_bytes.max(1)
    };
    if rows == 0 {
        return Err(format!(
            "{t:?} is zero rows (a row is {row_bytes} bytes); {what} holds at least one row"
        ));
    }
    if rows > u32::MAX as u64 - 1 {
        return Err(format!("{t:?} is more than 2^32 rows"));
    }
    Ok(rows)
}

/// The refusal of a bare number that is not a whole count of rows (`1.5`,
/// `-5`, `1e3`): a bare number is rows, bytes take a unit.
fn not_whole_rows(t: &str) -> String {
    format!("{t:?} is not a whole number of rows (rows like 1000, bytes like 64MiB)")
}

/// `--sizes` checked before the trace is read: `auto`, or sizes that are
/// whole rows or byte sizes, none zero.
pub fn check_sizes(spec: &[String]) -> Result<(), Fail> {
    if spec.len() == 1 && spec[0].trim() == "auto" {
        return Ok(());
    }
    for s in spec {
        let t = s.trim();
        if !t.chars().all(|c| c.is_ascii_digit()) && t.parse::<f64>().is_ok() {
            return Err(usage(format!("--sizes: {}", not_whole_rows(t))));
        }
        match t.parse::<embtier::ByteSize>() {
            Ok(b) if b.0 > 0 => {}
            Ok(_) => {
                return Err(usage(format!(
                    "--sizes: {t:?} is zero; a cache holds at least one row"
                )))
            }
            Err(e) => {
                return Err(usage(format!(
                    "--sizes: {e} (rows like 1000, bytes like 64MiB, or auto)"
                )))
            }
        }
    }
    Ok(())
}

/// `--row-bytes` of a command that makes tables (`plan`, `run`): the bytes
/// of a row of f32 weights, a positive multiple of 4 (5 was planned as 4
/// without a word).
pub fn parse_f32_row_bytes(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n > 0 && n % 4 == 0 => Ok(n),
        Ok(n) => Err(format!(
            "{n} is not a row of f32 weights: a positive multiple of 4 bytes (dim = row bytes / 4)"
        )),
        Err(_) => Err(format!("{s:?} is not a number of bytes")),
    }
}

/// A sampling rate in (0, 1] (`--sample`).
pub fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err(format!("{s:?} is not a rate in (0, 1]")),
    }
}

/// The device options of every command that estimates time.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Devices {
    /// Built-in device profiles per tier, TIER=PROFILE, comma separated
    /// (built-ins: dram, optane-pmem, optane-ssd, nand-nvme; by default
    /// dram=dram,pmem=optane-pmem,ssd=nand-nvme).
    #[arg(long, value_delimiter = ',')]
    pub devices: Vec<String>,
    /// A device profile file, as `emb-replay calibrate` writes it: [dram],
    /// [pmem], [ssd] (or any tier name), each with latency_us, read_gbps,
    /// write_gbps, iops and parallelism. Its tiers override --devices.
    #[arg(long)]
    pub profile: Option<PathBuf>,
}

impl Devices {
    fn parts(&self) -> Result<(Profiles, HashMap<String, String>), Fail> {
        let file = match &self.profile {
            Some(p) => profile::read_profiles(p).map_err(data)?,
            None => Profiles::new(),
        };
        let mut chosen = HashMap::new();
        for d in &self.devices {
            let (tier, dev) = d
                .split_once('=')
                .ok_or_else(|| usage(format!("--devices: {d:?} is not TIER=PROFILE")))?;
            let tier = tier.trim().to_string();
            if chosen
                .insert(tier.clone(), dev.trim().to_string())
                .is_some()
            {
                return Err(usage(format!("--devices: tier {tier} given twice")));
            }
        }
        Ok((file, chosen))
    }

    /// [`Devices::parts`], every tier --devices names one of `tiers`.
    fn parts_for(&self, tiers: &[&str]) -> Result<(Profiles, HashMap<String, String>), Fail> {
        let (file, chosen) = self.parts()?;
        let mut named: Vec<&String> = chosen.keys().collect();
        named.sort();
        if let Some(t) = named.into_iter().find(|t| !tiers.contains(&t.as_str())) {
            return Err(usage(format!(
                "--devices: no tier named {t} here (the tiers: {})",
                tiers.join(", ")
            )));
        }
        Ok((file, chosen))
    }

    /// The device of each of `tiers`.
    pub fn resolve(&self, tiers: &[&str]) -> Result<Vec<DeviceProfile>, Fail> {
        let (file, chosen) = self.parts_for(tiers)?;
        profile::resolve(tiers, &file, &chosen).map_err(|e| usage(format!("--devices: {e}")))
    }

    /// The devices of a store's DRAM, PMem and SSD.
    pub fn tiers(&self) -> Result<TierDevices, Fail> {
        let (file, chosen) = self.parts_for(&["dram", "pmem", "ssd"])?;
        TierDevices::resolve(&file, &chosen).map_err(|e| usage(format!("--devices: {e}")))
    }

    /// Where each of `tiers` got its profile, for the reports:
    /// `ssd=optane-ssd`, `dram=dram (default)`, `pmem from FILE`.
    pub fn describe(&self, tiers: &[&str]) -> Result<String, Fail> {
        let (file, chosen) = self.parts_for(tiers)?;
        Ok(tiers
            .iter()
            .map(|&t| {
                if file.contains_key(t) {
                    let path = self.profile.as_deref().unwrap_or(Path::new("--profile"));
                    format!("{t} from {}", path.display())
                } else if let Some(name) = chosen.get(t) {
                    format!("{t}={name}")
                } else {
                    format!("{t}={} (default)", profile::default_name(t))
                }
            })
            .collect::<Vec<_>>()
            .join(", "))
    }

    /// Whether any device option was given.
    pub fn given(&self) -> bool {
        !self.devices.is_empty() || self.profile.is_some()
    }
}

/// Read the input, with a spinner on a terminal; says which format `auto` chose.
pub fn load(input: &Input) -> Result<Trace, Fail> {
    let spinner = progress(&format!("reading {}", input.trace.display()));
    let imported = import_noting(
        &input.trace,
        input.format,
        &input.columns,
        input.batch_size as usize,
    )
    .map_err(data)?;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    let (t, f) = (imported.trace, imported.format);
    say_loaded(
        input,
        f,
        &imported.notes,
        t.accesses.len() as u64,
        t.batch_ends.len() as u64,
    );
    Ok(t)
}

/// What [`load`] and [`load_keys`] say of a file read as format `f`: the
/// format detected, the reader's notes, and the one-batch warning (not
/// for a `.etrace`, which carries its trainer's batches).
fn say_loaded(input: &Input, f: Format, notes: &[Note], accesses: u64, batches: u64) {
    if input.format == Format::Auto {
        eprintln!("{}: read as {}", input.trace.display(), f.name());
    }
    let batches = if f == Format::Etrace { 0 } else { batches };
    say_read(input, notes, accesses, batches);
}

/// A trace's requests as keys ([`embtier_sim::trace::Access::key`]: one
/// id space over (table, row)), in order: what a policy sweep holds.
pub struct Keys {
    /// The catalog.
    pub tables: Vec<TraceTable>,
    /// Each request's key.
    pub keys: Vec<u64>,
    /// Requests per table.
    pub per_table: Vec<u64>,
    /// With `own_ids`, an oracleGeneral file's own id of each key (its
    /// dense row): see [`embtier_sim::trace::import_stream_ids`].
    pub own_ids: Option<Vec<u64>>,
}

/// The requests of `input` as [`Keys`] (with `own_ids`, an oracleGeneral
/// file's own ids too), the file streamed (8 bytes a
/// request held, not a whole [`Trace`]'s 16 and then the keys: `emb-replay
/// simulate` of a 5.3 M-request trace held 194 MB before), saying what
/// [`load`] says.
pub fn load_keys(input: &Input, own_ids: bool) -> Result<Keys, Fail> {
    let spinner = progress(&format!("reading {}", input.trace.display()));
    let mut keys = Vec::new();
    let mut per_table: Vec<u64> = Vec::new();
    let mut batches = 0u64;
    let (f, tables, notes, own) = import_stream_ids(
        &input.trace,
        input.format,
        &input.columns,
        input.batch_size as usize,
        own_ids,
        |b| {
            batches += 1;
            keys.reserve(b.len());
            for a in b {
                keys.push(a.key());
                let t = a.table as usize;
                if t >= per_table.len() {
                    per_table.resize(t + 1, 0);
                }
                per_table[t] += 1;
            }
        },
    )
    .map_err(data)?;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    say_loaded(input, f, &notes, keys.len() as u64, batches);
    // The simulations number the (table, row) keys in 32 bits.
    embtier_sim::densify::check_dense(&keys).map_err(|limit| {
        data(format!(
            "{}: more than {limit} distinct (table, row) keys; the simulations number them in 32 bits",
            input.trace.display()
        ))
    })?;
    per_table.resize(tables.len().max(per_table.len()), 0);
    Ok(Keys {
        tables,
        keys,
        per_table,
        own_ids: own,
    })
}

/// What a reader of `input` decided or doubts (its notes), and a warning
/// when `batches` cut by `--batch-size` make the whole trace one batch.
pub fn say_read(input: &Input, notes: &[Note], accesses: u64, batches: u64) {
    for n in notes {
        let w = if n.warning { "warning: " } else { "" };
        eprintln!("{w}{}: {}", input.trace.display(), n.text);
    }
    if batches == 1 && accesses > 1 {
        eprintln!(
            "warning: {}: the whole trace is one batch ({accesses} accesses; --batch-size {}): per-batch figures (working sets, bandwidth, time per batch) describe that one batch; set --batch-size to the trainer's",
            input.trace.display(),
            input.batch_size
        );
    }
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

/// A bar of `batches` on stderr, or nothing when stderr is not a terminal.
pub fn batch_bar(batches: u64) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = indicatif::ProgressBar::new(batches);
    b.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} batches {eta}")
            .expect("a valid template"),
    );
    Some(b)
}

/// Write the output; a closed pipe (`| head`) is a normal end, not an error.
pub fn emit(o: &str) -> Result<(), Fail> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(o.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(data(format!("stdout: {e}"))),
        _ => Ok(()),
    }
}

/// `cmd` with every option that takes a value taking a negative number as
/// one, in every subcommand: `--update-ratio -0.5` then meets the
/// option's own range check, naming it, instead of clap's "unexpected
/// argument '-0'".
fn numbers_as_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        if a.get_action().takes_values() {
            a.allow_negative_numbers(true)
        } else {
            a
        }
    })
    .mut_subcommands(numbers_as_values)
}

/// Parse the command line and run: usage errors print `NAME: error:
/// MESSAGE (see --help)` on one line and exit 2, as every other error of
/// the tools is one line; failures print `NAME: error: MESSAGE` and exit
/// with their status. `--help` and `--version` print as clap prints them.
pub fn main_with<C: clap::Parser>(name: &str, run: impl FnOnce(C) -> Result<(), Fail>) -> ExitCode {
    let parsed = numbers_as_values(C::command())
        .try_get_matches()
        .and_then(|m| C::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // No subcommand: the help itself, as a usage error.
            let _ = e.print();
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("{name}: error: {}", usage_line(&e.to_string()));
            return ExitCode::from(2);
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

/// clap's usage error on one line: its message (the lines before the
/// usage and the help hint, joined), without its `error: `, and where to
/// look.
fn usage_line(rendered: &str) -> String {
    let msg: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
        .collect();
    // A line that ends in `:` goes on with the next (`were not provided:
    // <TRACE>`); clap's other lines (a `tip:`) are clauses of their own.
    let mut joined = String::new();
    for l in msg {
        if !joined.is_empty() {
            joined.push_str(if joined.ends_with(':') { " " } else { "; " });
        }
        joined.push_str(l);
    }
    let msg = joined.strip_prefix("error: ").unwrap_or(&joined);
    // clap's suggestion lines ("tip: a similar argument exists: ...") stay.
    format!("{msg} (see --help)")
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
