//! `modnode.toml`: every `modnode run` flag as a config key of the same name, flags overriding
//! the file; `modnode config show` prints the effective configuration with where each value came
//! from, `modnode config init` writes a commented default file.
//!
//! The file is flat: `listen = "0.0.0.0:9400"`, `no-produce = true`,
//! `bootstrap = ["<id>@10.0.0.2:9400", …]`. Values may be TOML strings, integers, booleans (for
//! on/off flags) or arrays (for flags that repeat). The file's values become flags placed before
//! the command line's, and a key whose flag is also on the command line is skipped, so clap
//! checks the file's values exactly as it checks flags and the command line always wins.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::parser::ValueSource;
use clap::{ArgAction, Args as _, FromArgMatches as _};

use super::run::RunArgs;

/// The `run` flag that names the config file; it cannot itself be a key.
const CONFIG_FLAG: &str = "config";

/// Options of `modnode config show`: the file and flags `modnode run` would be given.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The `modnode run` flags (a `--config FILE` among them reads that file).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "RUN FLAGS"
    )]
    pub run: Vec<OsString>,
}

/// Options of `modnode config init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// Where to write the file.
    #[arg(short, long, default_value = "modnode.toml")]
    pub output: PathBuf,
    /// Overwrite an existing file.
    #[arg(long)]
    pub force: bool,
}

/// Where an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Given on the command line.
    Flag,
    /// Read from the config file, at this 1-based line.
    File { path: PathBuf, line: usize },
    /// The flag's default.
    Default,
}

/// One effective setting: the key (the flag's long name), its values as `run` parsed them, and
/// where they came from.
#[derive(Debug, Clone)]
pub struct Setting {
    /// The key, which is the flag's long name.
    pub key: String,
    /// The values (several for repeated flags, none for an unset optional one).
    pub values: Vec<String>,
    /// Whether the flag is an on/off switch.
    pub switch: bool,
    /// Where the value came from.
    pub origin: Origin,
}

/// `run`'s flags as clap knows them (a standalone command, so tests and `config show` can parse).
fn run_command() -> clap::Command {
    RunArgs::augment_args(clap::Command::new("run").no_binary_name(true))
}

/// The `run` flags a file may set: every long flag but `--config`, keyed by long name.
fn settable() -> BTreeMap<String, clap::Arg> {
    run_command()
        .get_arguments()
        .filter_map(|arg| Some((arg.get_long()?.to_owned(), arg.clone())))
        .filter(|(long, _)| long != CONFIG_FLAG && long != "help")
        .collect()
}

/// The line (1-based) where `key` is assigned in `text`, for error messages and `config show`.
fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|line| {
            let line = line.trim_start();
            let line = line
                .strip_prefix('"')
                .and_then(|rest| rest.strip_prefix(key))
                .and_then(|rest| rest.strip_prefix('"'))
                .or_else(|| line.strip_prefix(key));
            line.is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map_or(0, |index| index.saturating_add(1))
}

/// The nearest settable key to an unknown one, when it is close enough to be a typo.
fn suggestion<'a>(key: &str, known: impl Iterator<Item = &'a String>) -> Option<&'a String> {
    let wanted = key.replace('_', "-");
    known
        .map(|candidate| (strsim_distance(&wanted, candidate), candidate))
        .filter(|(distance, candidate)| *distance <= 2.max(candidate.len() / 4))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance (the keys are short; quadratic is fine).
fn strsim_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = i;
        let mut next = vec![i.saturating_add(1)];
        for (j, cb) in b.iter().enumerate() {
            let replace = diagonal.saturating_add(usize::from(ca != *cb));
            let delete = row.get(j.saturating_add(1)).copied().unwrap_or(usize::MAX);
            let insert = next.last().copied().unwrap_or(usize::MAX);
            diagonal = delete;
            next.push(
                replace
                    .min(delete.saturating_add(1))
                    .min(insert.saturating_add(1)),
            );
        }
        row = next;
    }
    row.last().copied().unwrap_or(usize::MAX)
}

/// A config file turned into `run` flags, with the line of each key.
struct FileFlags {
    /// `--key value` pairs (and bare `--switch`), in file order per key.
    flags: BTreeMap<String, Vec<OsString>>,
    /// The line of each key.
    lines: BTreeMap<String, usize>,
}

/// Reads and checks a config file: every key a `run` flag, every value of a type that flag
/// takes. Errors name the file, the line and the key.
fn read_file(path: &Path) -> anyhow::Result<FileFlags> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    let table: toml::Table = toml::from_str(&text)
        .with_context(|| format!("{} is not a valid TOML file", path.display()))?;
    let known = settable();
    let mut flags = BTreeMap::new();
    let mut lines = BTreeMap::new();
    for (key, value) in table {
        if value.is_table() {
            let line = text
                .lines()
                .position(|l| l.trim().starts_with(&format!("[{key}]")))
                .map_or(0, |index| index.saturating_add(1));
            anyhow::bail!(
                "{}:{line}: `[{key}]` is a section; the file is flat, one `key = value` per \
                 `modnode run` flag",
                path.display()
            );
        }
        let line = line_of(&text, &key);
        let at = format!("{}:{line}", path.display());
        let Some(arg) = known.get(&key) else {
            if key == CONFIG_FLAG {
                anyhow::bail!("{at}: `config` cannot be set in a config file (it names the file)");
            }
            let hint = suggestion(&key, known.keys())
                .map(|s| format!("; did you mean `{s}`?"))
                .unwrap_or_default();
            anyhow::bail!(
                "{at}: unknown key `{key}`: keys are `modnode run` flags without the dashes \
                 (see `modnode config init`){hint}"
            );
        };
        let switch = matches!(arg.get_action(), ArgAction::SetTrue);
        let repeats = matches!(arg.get_action(), ArgAction::Append);
        let flag = OsString::from(format!("--{key}"));
        let scalar = |value: &toml::Value| -> anyhow::Result<String> {
            match value {
                toml::Value::String(s) => Ok(s.clone()),
                toml::Value::Integer(i) => Ok(i.to_string()),
                toml::Value::Float(f) => Ok(f.to_string()),
                other => anyhow::bail!(
                    "{at}: `{key}` takes a string or a number, not a {}",
                    other.type_str()
                ),
            }
        };
        let mut args = Vec::new();
        match (&value, switch, repeats) {
            (toml::Value::Boolean(on), true, _) => {
                if *on {
                    args.push(flag);
                }
            }
            (_, true, _) => anyhow::bail!(
                "{at}: `{key}` is an on/off switch: write `{key} = true` or `{key} = false`"
            ),
            (toml::Value::Array(items), false, true) => {
                for item in items {
                    args.push(flag.clone());
                    args.push(scalar(item)?.into());
                }
            }
            (toml::Value::Array(_), false, false) => {
                anyhow::bail!("{at}: `{key}` takes one value, not a list")
            }
            (value, false, _) => {
                args.push(flag);
                args.push(scalar(value)?.into());
            }
        }
        lines.insert(key.clone(), line);
        flags.insert(key, args);
    }
    Ok(FileFlags { flags, lines })
}

/// The index of an argument's id among the matches: the clap id of a long flag.
fn id_of(long: &str) -> Option<String> {
    run_command()
        .get_arguments()
        .find(|arg| arg.get_long() == Some(long))
        .map(|arg| arg.get_id().to_string())
}

/// The error for a command line with the file's flags in front: blamed on the file and the
/// key's line when the file's values alone fail the same way, on the command line otherwise.
fn blame(
    error: clap::Error,
    file_args: &[OsString],
    file: Option<&FileFlags>,
    path: Option<&Path>,
) -> anyhow::Error {
    if let (Some(file), Some(path)) = (file, path)
        && let Err(alone) = run_command().try_get_matches_from(file_args)
        && alone.kind() == error.kind()
    {
        let text = alone.to_string();
        let line = file
            .lines
            .iter()
            .find(|(key, _)| text.contains(&format!("--{key}")))
            .map(|(key, line)| format!(":{line} (`{key}`)"))
            .unwrap_or_default();
        return anyhow::anyhow!("{}{line}: {}", path.display(), text.trim_end());
    }
    anyhow::anyhow!("{}", error.to_string().trim_end())
}

/// `run`'s arguments with the config file (if `--config` names one) applied under the command
/// line, and where every value came from.
pub fn resolve(command_line: &[OsString]) -> anyhow::Result<(RunArgs, Vec<Setting>)> {
    let cli = run_command()
        .try_get_matches_from(command_line)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let file_path = cli.get_one::<PathBuf>(CONFIG_FLAG).cloned();
    let file = file_path.as_deref().map(read_file).transpose()?;
    let mut argv: Vec<OsString> = Vec::new();
    if let Some(file) = &file {
        let mut from_file = Vec::new();
        for (key, args) in &file.flags {
            let given = id_of(key)
                .and_then(|id| cli.value_source(&id))
                .is_some_and(|source| source == ValueSource::CommandLine);
            if !given {
                from_file.extend(args.iter().cloned());
            }
        }
        argv.extend(from_file);
    }
    let file_args = argv.clone();
    argv.extend(command_line.iter().cloned());
    let matches = match run_command().try_get_matches_from(&argv) {
        Ok(matches) => matches,
        Err(e) => return Err(blame(e, &file_args, file.as_ref(), file_path.as_deref())),
    };
    let args = RunArgs::from_arg_matches(&matches).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut settings = Vec::new();
    for (key, arg) in settable() {
        let id = arg.get_id().as_str();
        let switch = matches!(arg.get_action(), ArgAction::SetTrue);
        let origin = match cli.value_source(id) {
            Some(ValueSource::CommandLine) => Origin::Flag,
            _ => match (file.as_ref(), file_path.as_ref()) {
                (Some(file), Some(path)) if file.flags.contains_key(&key) => Origin::File {
                    path: path.clone(),
                    line: file.lines.get(&key).copied().unwrap_or(0),
                },
                _ => Origin::Default,
            },
        };
        let values = matches
            .get_raw(id)
            .map(|raw| {
                raw.map(|v| v.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        settings.push(Setting {
            key,
            values,
            switch,
            origin,
        });
    }
    Ok((args, settings))
}

/// `run`'s arguments from the process's command line (everything after `run`), with the config
/// file applied when `--config` is given.
pub fn run_args_from_env() -> anyhow::Result<RunArgs> {
    let mut argv = std::env::args_os().skip(1);
    anyhow::ensure!(
        argv.next().is_some_and(|first| first == "run"),
        "the config file applies to `modnode run` only"
    );
    let command_line: Vec<OsString> = argv.collect();
    let (args, _) = resolve(&command_line)?;
    Ok(args)
}

/// A value as TOML text.
fn toml_value(setting: &Setting) -> String {
    let one = |v: &str| {
        if v.parse::<i64>().is_ok() {
            v.to_owned()
        } else {
            toml::Value::String(v.to_owned()).to_string()
        }
    };
    if setting.switch {
        return (setting.values.first().map(String::as_str) == Some("true")).to_string();
    }
    match setting.values.as_slice() {
        [] => String::new(),
        [v] if !matches!(setting.key.as_str(), "bootstrap" | "trusted-addr") => one(v),
        many => format!(
            "[{}]",
            many.iter().map(|v| one(v)).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The effective configuration as a TOML file, each line saying where its value came from.
pub fn show_text(settings: &[Setting]) -> String {
    let mut out = String::new();
    for setting in settings {
        let origin = match &setting.origin {
            Origin::Flag => "flag".to_owned(),
            Origin::File { path, line } => format!("{}:{line}", path.display()),
            Origin::Default => "default".to_owned(),
        };
        let value = toml_value(setting);
        if value.is_empty() {
            let _ = writeln!(out, "# {} is not set  # {origin}", setting.key);
        } else {
            let _ = writeln!(out, "{} = {value}  # {origin}", setting.key);
        }
    }
    out
}

/// `modnode config show`.
pub fn show(args: ShowArgs) -> anyhow::Result<()> {
    let (_, settings) = resolve(&args.run)?;
    print!("{}", show_text(&settings));
    Ok(())
}

/// The commented default file: every key with its help and default, commented out.
pub fn default_file() -> String {
    let mut out = String::from(
        "# modnode.toml: `modnode run --config modnode.toml`.\n\
         # Every key is a `modnode run` flag without the dashes; a flag on the command line\n\
         # overrides the file. Uncomment what you change. `modnode config show --config FILE`\n\
         # prints the effective values and where each came from.\n",
    );
    for (key, arg) in settable() {
        if arg.is_hide_set() {
            continue;
        }
        let _ = writeln!(out);
        if let Some(help) = arg.get_long_help().or_else(|| arg.get_help()) {
            for line in help.to_string().lines() {
                let _ = writeln!(out, "# {line}");
            }
        }
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let switch = matches!(arg.get_action(), ArgAction::SetTrue);
        let value = if switch {
            "false".to_owned()
        } else if defaults.is_empty() {
            let name = arg
                .get_value_names()
                .and_then(|names| names.first().map(|n| n.to_string()))
                .unwrap_or_else(|| key.to_uppercase());
            // Not valid TOML until replaced: there is no default to uncomment.
            if matches!(arg.get_action(), ArgAction::Append) {
                format!("[<{name}>, …]  (not set by default)")
            } else {
                format!("<{name}>  (not set by default)")
            }
        } else {
            toml_value(&Setting {
                key: key.clone(),
                values: defaults,
                switch,
                origin: Origin::Default,
            })
        };
        let _ = writeln!(out, "# {key} = {value}");
    }
    out
}

/// `modnode config init`.
pub fn init(args: InitArgs) -> anyhow::Result<()> {
    if args.output.exists() && !args.force {
        anyhow::bail!(
            "{} exists; give --force to overwrite it",
            args.output.display()
        );
    }
    modnode::files::write_private_atomically(&args.output, default_file().as_bytes())
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    println!("wrote {}", args.output.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("modnode.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn flags_override_the_file_and_the_file_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "listen = \"127.0.0.1:9500\"\nadmin = \"127.0.0.1:9501\"\nno-produce = true\n\
             checkpoint-interval = 50\nbootstrap = []\n",
        );
        let p = path.to_str().unwrap();
        let (args, settings) = resolve(&os(&["--config", p, "--admin", "127.0.0.1:9600"])).unwrap();
        assert_eq!(args.listen.port(), 9500, "file value");
        assert_eq!(args.admin.port(), 9600, "flag beats the file");
        assert!(args.no_produce);
        assert_eq!(args.checkpoint_interval, 50);
        assert_eq!(args.checkpoint_keep, 2, "default");
        let origin = |key: &str| {
            settings
                .iter()
                .find(|s| s.key == key)
                .unwrap()
                .origin
                .clone()
        };
        assert_eq!(origin("admin"), Origin::Flag);
        assert_eq!(
            origin("listen"),
            Origin::File {
                path: path.clone(),
                line: 1
            }
        );
        assert_eq!(
            origin("checkpoint-interval"),
            Origin::File {
                path: path.clone(),
                line: 4
            }
        );
        assert_eq!(origin("checkpoint-keep"), Origin::Default);
        let shown = show_text(&settings);
        assert!(
            shown.contains("admin = \"127.0.0.1:9600\"  # flag"),
            "{shown}"
        );
        assert!(
            shown.contains(&format!("listen = \"127.0.0.1:9500\"  # {p}:1")),
            "{shown}"
        );
        assert!(shown.contains("no-produce = true"), "{shown}");
        assert!(shown.contains("checkpoint-keep = 2  # default"), "{shown}");
    }

    #[test]
    fn history_is_a_key_of_the_file_and_its_flag_wins() {
        use crate::commands::run::HistoryArg;
        use modnode::chain::prune::History;
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "history = 4096\n");
        let p = path.to_str().unwrap();
        let (args, _) = resolve(&os(&["--config", p])).unwrap();
        assert_eq!(args.history, HistoryArg::Given(History::Blocks(4096)));
        let (args, _) = resolve(&os(&["--config", p, "--history", "full"])).unwrap();
        assert_eq!(args.history, HistoryArg::Given(History::Full));
        let (args, settings) = resolve(&os(&[])).unwrap();
        assert_eq!(args.history, HistoryArg::Day, "a day of slots by default");
        assert!(show_text(&settings).contains("history = \"day\"  # default"));
        let bad = write(dir.path(), "\nhistory = \"forever\"\n");
        let e = resolve(&os(&["--config", bad.to_str().unwrap()]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("history") && e.contains("full"), "{e}");
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_key_and_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                "data-dir = \"x\"\nlisten-addr = \"1.2.3.4:1\"\n",
                ":2: unknown key `listen-addr`",
            ),
            ("data_dir = \"x\"\n", "did you mean `data-dir`?"),
            (
                "no-produce = \"yes\"\n",
                ":1: `no-produce` is an on/off switch",
            ),
            (
                "listen = [\"a\", \"b\"]\n",
                ":1: `listen` takes one value, not a list",
            ),
            ("[run]\nlisten = \"x\"\n", "`[run]` is a section"),
            ("config = \"other.toml\"\n", "`config` cannot be set"),
            ("\n\nlisten = \"not an address\"\n", ":3 (`listen`)"),
            ("listen = \n", "is not a valid TOML file"),
        ];
        for (text, expected) in cases {
            let path = write(dir.path(), text);
            let err = resolve(&os(&["--config", path.to_str().unwrap()]))
                .err()
                .unwrap_or_else(|| panic!("{text:?} was accepted"));
            let err = format!("{err:#}");
            assert!(err.contains(expected), "{text:?}: {err}");
            assert!(
                err.contains("modnode.toml"),
                "{text:?} does not name the file: {err}"
            );
        }
    }

    #[test]
    fn the_default_file_parses_to_the_defaults_once_uncommented() {
        let dir = tempfile::tempdir().unwrap();
        let text = default_file();
        assert!(text.contains("# listen = \"127.0.0.1:9400\""), "{text}");
        // Uncomment every assignment with a real default (placeholders are `<…>`), except the
        // ones that only make sense beside --eth1-endpoint.
        let uncommented: String = text
            .lines()
            .filter_map(|line| line.strip_prefix("# "))
            .filter(|line| {
                line.split_once(" = ").is_some_and(|(key, value)| {
                    !key.contains(' ')
                        && !value.starts_with('<')
                        && !value.starts_with("[<")
                        && !["eth1-chain-id", "deposit-start-block"].contains(&key)
                })
            })
            .map(|line| format!("{line}\n"))
            .collect();
        assert!(uncommented.lines().count() >= 10, "{uncommented}");
        let path = write(dir.path(), &uncommented);
        let (from_file, _) = resolve(&os(&["--config", path.to_str().unwrap()])).unwrap();
        let (defaults, _) = resolve(&[]).unwrap();
        assert_eq!(
            format!("{:?}", from_file.deposits),
            format!("{:?}", defaults.deposits)
        );
        assert_eq!(from_file.listen, defaults.listen);
        assert_eq!(from_file.data_dir, defaults.data_dir);
        assert_eq!(from_file.checkpoint_interval, defaults.checkpoint_interval);
    }

    #[test]
    fn repeated_flags_come_from_arrays_and_the_command_line_replaces_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "trusted-addr = [\"10.0.0.1\", \"10.0.0.2\"]\n");
        let p = path.to_str().unwrap();
        let (args, _) = resolve(&os(&["--config", p])).unwrap();
        assert_eq!(args.trusted_addr.len(), 2);
        let (args, _) = resolve(&os(&["--config", p, "--trusted-addr", "10.0.0.9"])).unwrap();
        assert_eq!(
            args.trusted_addr,
            vec!["10.0.0.9".parse::<std::net::IpAddr>().unwrap()]
        );
    }
}
