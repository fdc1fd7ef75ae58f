//! The refused classes of a `run` line, by program and target (docs/design.md §13 "Guardrails at
//! write time").
//!
//! Owns: what each simple command means ([`effects`]: the program run after wrappers, the paths
//! it deletes, overwrites or modifies, the command lines it runs in turn, or a refusal of its
//! own) and the rules on the paths ([`check_target`]); the program lists are `programs.rs`,
//! git's rules `git.rs`, the less common writers (`perl -i`, `tar -x`, `find`, …) `writers.rs`.
//! Must not parse shell syntax (that is `shell.rs`) nor touch the filesystem.

use std::path::{Path, PathBuf};

use super::git;
use super::opts::{scan, Spec};
use super::paths::{self, Target};
use super::programs::{cicy_agent, installs, publishes, NETWORK, RUNS_OTHERS};
use super::shell::{self, Arg, Item, Simple, Write};
use super::writers;
use super::Refusal;

/// The places the rules protect, lexically normalised.
#[derive(Debug, Clone)]
pub(super) struct Places {
    pub workspace: PathBuf,
    pub home: PathBuf,
    /// `<workspace>/.cicy`
    pub cicy: PathBuf,
    /// `<workspace>/.cicy/memory`
    pub memory: PathBuf,
}

impl Places {
    pub(super) fn new(workspace: &Path, home: &Path) -> Self {
        let workspace = paths::normalize(workspace);
        let cicy = workspace.join(".cicy");
        Self { memory: cicy.join("memory"), cicy, home: paths::normalize(home), workspace }
    }

    /// The escaped workspace: the first working directory of a `run` line.
    pub(super) fn start_cwd(&self) -> String {
        globset::escape(&self.workspace.to_string_lossy())
    }
}

/// What one simple command does.
#[derive(Debug, Clone)]
pub(super) enum Effect {
    /// Refused whatever its targets.
    Refuse(Refusal),
    /// The program run (basename, after wrappers).
    Program(String),
    /// A path written; `what` names the writer for reasons (e.g. "`rm`", "a redirect").
    Target { how: Write, arg: Arg, cwds: Vec<String>, what: String },
    /// Commands it runs in turn (`bash -c`, `find -exec`, `xargs`).
    Nested(Vec<Item>),
}

pub(super) fn refusal(class: &str, reason: String) -> Refusal {
    Refusal { class: class.to_string(), reason }
}

pub(super) fn unparsed(reason: String) -> Effect {
    Effect::Refuse(refusal("unparsed", reason))
}

/// Shells whose `-c` text (or stdin) is classified in turn.
pub(super) const SHELLS: &[&str] = &["bash", "sh", "dash", "zsh", "ksh", "ash", "mksh"];

/// Programs that run the rest of their arguments as a command, and how their own options look.
fn wrapper(name: &str) -> Option<Spec> {
    let spec = |short_value: &'static str, long_value: &'static [&'static str]| Some(Spec { short_value, long_value, ..Spec::default() });
    match name {
        "env" => spec("uCS", &["unset", "chdir", "split-string"]),
        "nice" => spec("n", &["adjustment"]),
        "timeout" => spec("ks", &["kill-after", "signal"]),
        "nohup" | "setsid" | "command" | "builtin" | "busybox" => spec("", &[]),
        "exec" => spec("a", &[]),
        "sudo" => spec("CDghpRrTtUu", &["user", "group", "host", "prompt", "chdir", "close-from", "other-user", "role", "type"]),
        "doas" => spec("uC", &[]),
        "stdbuf" => spec("ioe", &["input", "output", "error"]),
        "time" => spec("fo", &["format", "output"]),
        "ionice" => spec("cnpPu", &["class", "classdata"]),
        "xargs" => Some(Spec {
            short_value: "adEILnPs",
            short_optional: "eil",
            long_value: &["arg-file", "delimiter", "max-lines", "max-args", "max-procs", "max-chars", "process-slot-var"],
            permute: false,
        }),
        _ => None,
    }
}

/// The basename of a program path.
fn base(prog: &str) -> &str {
    prog.rsplit('/').next().unwrap_or(prog)
}

/// What `sc` does; its redirects come first.
pub(super) fn effects(sc: &Simple, places: &Places, depth: usize) -> Vec<Effect> {
    // Bash itself opens `/dev/tcp/HOST/PORT` and `/dev/udp/…` as sockets.
    let socket = sc.writes.iter().map(|(_, a)| a).chain(&sc.reads).find(|a| {
        let lead = a.leading_text();
        lead.starts_with("/dev/tcp/") || lead.starts_with("/dev/udp/")
    });
    if let Some(a) = socket {
        return vec![Effect::Refuse(refusal("network", format!("a redirect to `{}` reaches the network", a.source)))];
    }
    let mut out: Vec<Effect> = sc
        .writes
        .iter()
        .map(|(how, arg)| Effect::Target { how: *how, arg: arg.clone(), cwds: sc.cwds.clone(), what: "a redirect".into() })
        .collect();
    let mut argv = sc.argv.as_slice();
    // Variables set for the command: before it, or by `env`/`sudo`.
    let mut assigns = sc.assigns.clone();
    if argv.is_empty() {
        // A bare assignment lasts for the rest of the line (and reaches git when exported).
        if let Some(name) = assigns.iter().find(|n| git::runs_commands(n)) {
            out.push(git::env_refusal(name));
        }
        return out;
    }
    // Wrappers, innermost last (`sudo env X=1 nice rm …`).
    let mut wrappers = 0;
    loop {
        let Some(first) = argv.first() else { return out };
        let Some(prog) = first.literal() else {
            out.push(unparsed(format!("the program `{}` is not a fixed word", first.source)));
            return out;
        };
        let name = base(&prog);
        let Some(spec) = wrapper(name) else { break };
        wrappers += 1;
        if wrappers > shell::MAX_DEPTH {
            out.push(unparsed(format!("more than {} wrapper programs around one command", shell::MAX_DEPTH)));
            return out;
        }
        let rest = &argv[1..];
        let s = scan(rest, &spec);
        if name == "env" && (s.has("S") || s.has("split-string") || s.has("C") || s.has("chdir")) {
            out.push(unparsed(format!(
                "`env -{}` changes how the command is read or where it runs",
                if s.has("C") || s.has("chdir") { "C" } else { "S" }
            )));
            return out;
        }
        if name == "command" && (s.has("v") || s.has("V")) {
            // `command -v curl` only says where `curl` is.
            return out;
        }
        let mut start = s.positionals.first().copied().unwrap_or(rest.len());
        match name {
            // NAME=VALUE words before the command.
            "env" | "sudo" => {
                while let Some(t) = rest.get(start).and_then(Arg::text).filter(|t| t.contains('=') && !t.starts_with('=')) {
                    assigns.extend(git::assigned_name(&t).map(str::to_string));
                    start += 1;
                }
            }
            "timeout" => start += 1,
            "xargs" => {
                // The command gets arguments read from stdin: unknown at write time.
                let mut inner: Vec<Arg> = rest.get(start..).unwrap_or_default().to_vec();
                if inner.is_empty() {
                    inner.push(Arg::lit("echo"));
                }
                inner.push(Arg::unknown("<stdin>"));
                out.push(Effect::Nested(vec![Item::Run(Simple { argv: inner, cwds: sc.cwds.clone(), ..Simple::default() })]));
                return out;
            }
            _ => {}
        }
        argv = rest.get(start..).unwrap_or_default();
    }
    let Some(prog) = argv.first().and_then(Arg::literal) else {
        if let Some(first) = argv.first() {
            out.push(unparsed(format!("the program `{}` is not a fixed word", first.source)));
        }
        return out;
    };
    let name = base(&prog).to_string();
    out.push(Effect::Program(name.clone()));
    let args = &argv[1..];
    let target = |how: Write, arg: &Arg| Effect::Target { how, arg: arg.clone(), cwds: sc.cwds.clone(), what: format!("`{name}`") };
    let each = |how: Write, idx: &[usize]| idx.iter().map(|&i| target(how, &args[i])).collect::<Vec<_>>();
    if let Some(what) = installs(&name, args) {
        out.push(Effect::Refuse(refusal("install", format!("`{what}` installs dependencies"))));
        return out;
    }
    if let Some(what) = publishes(&name, args) {
        out.push(Effect::Refuse(refusal("network", format!("`{what}` publishes to a registry over the network"))));
        return out;
    }
    match name.as_str() {
        "eval" => out.push(unparsed("`eval` runs text that is only built when it runs".into())),
        "alias" if args.iter().any(|a| a.text().is_none_or(|t| t.contains('='))) => {
            out.push(unparsed("`alias` defines a command the guard cannot follow".into()))
        }
        "cicy-agent" => out.extend(cicy_agent(args)),
        "git" => out.extend(git::git(args, sc, &assigns)),
        "export" | "declare" | "typeset" | "readonly" | "local" => {
            let names = args.iter().filter_map(Arg::text).filter_map(|t| git::assigned_name(&t).map(str::to_string)).collect::<Vec<_>>();
            out.extend(names.iter().find(|n| git::runs_commands(n)).map(|n| git::env_refusal(n)));
        }
        "trap" => out.extend(trap(args, sc, places, depth)),
        n if NETWORK.contains(&n) => out.push(Effect::Refuse(refusal("network", format!("`{n}` reaches the network")))),
        n if SHELLS.contains(&n) => out.extend(shell_text(n, args, sc, places, depth)),
        "source" | "." => out.extend(source(&name, args, sc, places, depth)),
        n if RUNS_OTHERS.contains(&n) => out.push(unparsed(format!("`{n}` runs another program the guard does not follow"))),
        "rm" | "rmdir" | "unlink" | "shred" => {
            let s = scan(
                args,
                &Spec { short_value: "ns", long_value: &["iterations", "size", "random-source"], permute: true, ..Spec::default() },
            );
            out.extend(each(Write::Delete, &s.positionals));
        }
        "truncate" => {
            let s = scan(args, &Spec { short_value: "sr", long_value: &["size", "reference"], permute: true, ..Spec::default() });
            out.extend(each(Write::Overwrite, &s.positionals));
        }
        "cp" | "mv" | "install" | "ln" => {
            let s = scan(
                args,
                &Spec {
                    short_value: "tSmogZ",
                    long_value: &["target-directory", "suffix", "mode", "owner", "group"],
                    permute: true,
                    ..Spec::default()
                },
            );
            let (sources, dest) = match s.value(args, "t").or_else(|| s.value(args, "target-directory")) {
                Some(dir) => (s.positionals.clone(), Some(dir)),
                None if name == "install" && (s.has("d") || s.has("directory")) => {
                    out.extend(each(Write::Modify, &s.positionals));
                    (Vec::new(), None)
                }
                None if name == "ln" && s.positionals.len() == 1 => (s.positionals.clone(), Some(Arg::lit("."))),
                None => match s.positionals.split_last() {
                    Some((last, rest)) if !rest.is_empty() => (rest.to_vec(), Some(args[*last].clone())),
                    _ => (Vec::new(), None),
                },
            };
            let links = name == "ln" || (name == "cp" && ["s", "l", "symbolic-link", "link"].iter().any(|o| s.has(o)));
            if links {
                out.extend(sources.iter().filter_map(|&i| link_to_runtime(&args[i], dest.as_ref(), &name, sc, places)));
            }
            if let Some(dest) = dest {
                // The destination may be a folder: each source lands inside it under its name
                // (replacing a file of that name), and the folder itself gains an entry (or is
                // the file replaced, when it is not a folder: then the folder names above hold).
                for &i in &sources {
                    if let Some(name) = args[i].literal().and_then(|t| Path::new(&t).file_name().map(|n| n.to_string_lossy().into_owned()))
                    {
                        // Reasons name the destination as written.
                        let mut inside = dest.clone();
                        inside.pieces.push(shell::Piece::Lit(format!("/{name}")));
                        out.push(target(Write::Overwrite, &inside));
                    }
                }
                out.push(target(Write::Modify, &dest));
            }
            if name == "mv" {
                out.extend(each(Write::Delete, &sources));
            }
        }
        "tee" => {
            let s = scan(args, &Spec { long_value: &["output-error"], permute: true, ..Spec::default() });
            let how = if s.has("a") || s.has("append") { Write::Modify } else { Write::Overwrite };
            out.extend(each(how, &s.positionals));
        }
        "sed" => {
            let s = scan(
                args,
                &Spec { short_value: "eflE", short_optional: "i", long_value: &["expression", "file", "line-length"], permute: true },
            );
            if s.has("i") || s.has("in-place") || s.opts.iter().any(|o| o.name.starts_with("in-place")) {
                let script_given = s.has("e") || s.has("f") || s.has("expression") || s.has("file");
                let files = if script_given { &s.positionals[..] } else { s.positionals.get(1..).unwrap_or_default() };
                out.extend(each(Write::Overwrite, files));
            }
        }
        "dd" => {
            let notrunc = args.iter().filter_map(Arg::text).any(|t| t.starts_with("conv=") && t.contains("notrunc"));
            for a in args {
                if a.text().is_none_or(|t| t.starts_with("of=")) {
                    let mut file = a.clone();
                    match file.pieces.first_mut() {
                        Some(shell::Piece::Lit(t) | shell::Piece::Glob(t)) if t.starts_with("of=") => *t = t[3..].to_string(),
                        _ => file.pieces.insert(0, shell::Piece::Unknown),
                    }
                    out.push(target(if notrunc { Write::Modify } else { Write::Overwrite }, &file));
                }
            }
        }
        "touch" | "mkdir" => {
            let s = scan(args, &Spec { short_value: "rdtm", long_value: &["reference", "date", "mode"], permute: true, ..Spec::default() });
            out.extend(each(Write::Modify, &s.positionals));
        }
        "chmod" | "chown" | "chgrp" => {
            let s = scan(args, &Spec { permute: true, ..Spec::default() });
            let skip = usize::from(!s.opts.iter().any(|o| o.name == "reference"));
            out.extend(each(Write::Modify, s.positionals.get(skip..).unwrap_or_default()));
        }
        "find" => out.extend(writers::find(args, sc)),
        n => out.extend(writers::writes(n, args, sc).unwrap_or_default()),
    }
    out
}

/// `bash -c TEXT` and `bash <<EOF` run their text; `bash script.sh` runs a file, which, like
/// `python3 script.py`, is not the guard's to read (`None`).
fn shell_text(name: &str, args: &[Arg], sc: &Simple, places: &Places, depth: usize) -> Option<Effect> {
    let s = scan(args, &Spec { short_value: "oO", long_value: &["rcfile", "init-file"], ..Spec::default() });
    let text = if s.has("c") {
        match s.positionals.first().map(|&i| &args[i]) {
            Some(a) => match a.text() {
                Some(t) => t,
                None => return Some(unparsed(format!("`{name} -c` runs `{}`, which is only known when it runs", a.source))),
            },
            None => return Some(unparsed(format!("`{name} -c` without a command"))),
        }
    } else {
        // `-s`: commands from stdin, the positionals are its arguments.
        let script = s.positionals.first().filter(|_| !s.has("s")).map(|&i| &args[i]);
        match script.map_or(Ok(true), script_is_stdin) {
            Ok(false) => return None,
            Ok(true) => match &sc.stdin {
                Some(t) => t.clone(),
                None => return Some(unparsed(format!("`{name}` reads its commands from stdin"))),
            },
            Err(src) => return Some(unparsed(format!("`{name}` runs `{src}`, a script only known when it runs"))),
        }
    };
    Some(Effect::Nested(shell::walk(&text, &sc.cwds, &places.home.to_string_lossy(), depth + 1)))
}

/// `source FILE` / `. FILE`: a file is not the guard's to read, but stdin (`. /dev/stdin <<<
/// …`) is followed like `bash <<<`, and a process substitution or descriptor is refused.
fn source(name: &str, args: &[Arg], sc: &Simple, places: &Places, depth: usize) -> Option<Effect> {
    let file = args.iter().find(|a| a.text().as_deref() != Some("--"))?;
    match script_is_stdin(file) {
        Ok(false) => None,
        Ok(true) => Some(match &sc.stdin {
            Some(t) => Effect::Nested(shell::walk(t, &sc.cwds, &places.home.to_string_lossy(), depth + 1)),
            None => unparsed(format!("`{name}` reads its commands from stdin")),
        }),
        Err(src) => Some(unparsed(format!("`{name}` runs `{src}`, a script only known when it runs"))),
    }
}

/// Whether a shell's script argument is its stdin (`-`, `/dev/stdin`, descriptor 0): `Ok(true)`;
/// an ordinary file: `Ok(false)`; a process substitution, another descriptor or a `/proc` path,
/// whose text only exists when it runs: `Err(source)`.
fn script_is_stdin(arg: &Arg) -> Result<bool, String> {
    if arg.is_process_substitution() {
        return Err(arg.source.clone());
    }
    let fixed = arg.leading_text();
    let path = paths::normalize_pattern(&fixed);
    let complete = arg.text().is_some();
    match path.as_str() {
        _ if fixed == "-" => Ok(true),
        "/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0" if complete => Ok(true),
        p if p.starts_with("/dev/fd") || p.starts_with("/proc/") || p.starts_with("/dev/std") => Err(arg.source.clone()),
        _ => Ok(false),
    }
}

/// `trap ACTION SIGNAL…`: the action is bash text run later (on `EXIT`, a signal, `ERR`…),
/// so it is classified now like `bash -c ACTION`; `trap - SIG`, `trap '' SIG`, `trap -p`/`-l`
/// run nothing.
fn trap(args: &[Arg], sc: &Simple, places: &Places, depth: usize) -> Option<Effect> {
    let s = scan(args, &Spec::default());
    if s.has("p") || s.has("l") {
        return None;
    }
    let action = &args[*s.positionals.first()?];
    // With one argument (`trap SIG`) bash resets SIG: nothing runs.
    if s.positionals.len() < 2 {
        return None;
    }
    match action.text() {
        Some(t) if t == "-" => None,
        Some(t) => Some(Effect::Nested(shell::walk(&t, &sc.cwds, &places.home.to_string_lossy(), depth + 1))),
        None => Some(unparsed(format!("`trap` runs `{}`, which is only known when it runs", action.source))),
    }
}

/// `ln [-s] TARGET… LINK`: a link whose target is `.cicy`, inside it or above it would let a
/// later write through the link reach the runtime's files. A relative symlink target is taken
/// from the working directory and from the link's folder (`LINK` and its parent).
fn link_to_runtime(src: &Arg, dest: Option<&Arg>, name: &str, sc: &Simple, places: &Places) -> Option<Effect> {
    let mut bases = sc.cwds.clone();
    for p in dest.into_iter().flat_map(|d| sc.cwds.iter().filter_map(|c| d.pattern(c))) {
        bases.push(paths::normalize_pattern(&format!("{p}/..")));
        bases.push(p);
    }
    for base in &bases {
        let Some(t) = src.pattern(base).and_then(|p| Target::new(&p).ok()) else {
            return Some(unparsed(format!("`{name}` links to `{}`, a path only known when it runs", src.source)));
        };
        if t.at_or_inside(&places.cicy) || t.at_or_above(&places.cicy) {
            return Some(Effect::Refuse(refusal(
                "kernel",
                format!("`{name}` to `{}` would make a link to the runtime's files (.cicy/)", src.source),
            )));
        }
    }
    None
}

/// The rules on one path a command writes (first match wins): memory, gates, config, kernel.
pub(super) fn check_target(how: Write, arg: &Arg, cwds: &[String], what: &str, places: &Places) -> Result<(), Refusal> {
    for cwd in cwds {
        let Some(raw) = arg.raw_pattern(cwd) else {
            return Err(refusal("unparsed", format!("{what} on `{}`: the path is only known when it runs", arg.source)));
        };
        if paths::through_alias(&raw) {
            return Err(refusal(
                "unparsed",
                format!("{what} on `{}` goes through /proc or /dev/fd, whose links the guard does not follow", arg.source),
            ));
        }
        let pattern = paths::normalize_pattern(&raw);
        let t = Target::new(&pattern)
            .map_err(|p| refusal("unparsed", format!("{what} on `{}`: `{p}` is not a pattern the guard can match", arg.source)))?;
        let on = format!("{what} on `{}`", arg.source);
        let any_memory = t.pattern.contains("/.cicy/memory/") || t.pattern.ends_with("/.cicy/memory");
        let memory = match how {
            Write::Delete | Write::Overwrite => {
                t.at_or_above(&places.memory) || t.inside(&places.memory) || any_memory || t.at_or_above(&places.home)
            }
            // Entries written inside a folder reach memory only from memory itself or below.
            Write::Into => t.at_or_inside(&places.memory) || any_memory,
            Write::Modify => false,
        };
        if memory {
            return Err(refusal("memory", format!("{on} would delete or overwrite the agent's memory (.cicy/memory)")));
        }
        // "At or inside": `cp x AGENTS.md` is also checked as `AGENTS.md/x` (the destination
        // may be a folder), which must not fall to a weaker rule first.
        if t.at_or_inside(&places.workspace.join("AGENTS.md")) {
            return Err(refusal("gates", format!("{on} would change AGENTS.md, the agent's <role> block (an injection gate)")));
        }
        let roles = places.home.join("roles");
        let config = ["config.json", "config.yaml", "lite-config.json"].iter().any(|f| t.at_or_inside(&places.home.join(f)));
        if config || t.at_or_inside(&roles) || (how == Write::Delete && t.at_or_above(&roles)) || role_meta(&t) {
            return Err(refusal("config", format!("{on} would change the runtime's configuration ($CICY_HOME config, roles, meta.yaml)")));
        }
        if t.file_name() == Some("cicy-agent") {
            return Err(refusal("kernel", format!("{on} would replace the cicy-agent binary")));
        }
        if t.at_or_inside(&places.cicy) || (how == Write::Delete && t.at_or_above(&places.cicy)) {
            return Err(refusal("kernel", format!("{on} would write the runtime's own files (.cicy/)")));
        }
        let in_home = t.matches(&places.home) || t.inside(&places.home);
        if in_home && !t.inside(&places.workspace) && !t.matches(&places.workspace) {
            return Err(refusal("kernel", format!("{on} would write the runtime's home ($CICY_HOME)")));
        }
    }
    Ok(())
}

/// Whether the pattern names a role template's `meta.yaml`: `…/roles/<slug>/meta.yaml`, in
/// `$CICY_HOME` or in a checkout of the runtime's packaged roles.
fn role_meta(t: &Target) -> bool {
    let comps: Vec<&str> = t.pattern.split('/').collect();
    t.file_name() == Some("meta.yaml") && comps.len() >= 3 && comps[comps.len() - 3] == "roles"
}
