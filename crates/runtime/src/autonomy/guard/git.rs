//! `git` command lines (docs/design.md §13 "push", "network egress", deleting memory): which are
//! refused and which paths they delete or overwrite. Owns the git subcommand rules and the
//! environment variables through which git runs a command of the caller's choosing; must not
//! judge the paths (that is `classify::check_target`).

use super::classify::{refusal, unparsed, Effect};
use super::opts::{scan, Spec};
use super::shell::{Arg, Simple, Write};

/// Variables git reads a command (or a config that names one) from: set in front of `git`,
/// by `env`, as a bare assignment or by `export`, the line is refused as unparsed. Names ending
/// in `_` are prefixes (`GIT_CONFIG_KEY_0`).
const RUNS_COMMANDS: &[&str] = &[
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_PAGER",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_PROXY_COMMAND",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_KEY_",
    "GIT_CONFIG_VALUE_",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "PAGER",
    "EDITOR",
    "VISUAL",
];

/// Variables that move the tree git works on away from its working directory.
const MOVES_TREE: &[&str] = &["GIT_WORK_TREE", "GIT_DIR"];

/// Whether assigning `name` may make a later `git` run a command (see [`RUNS_COMMANDS`]).
pub(super) fn runs_commands(name: &str) -> bool {
    RUNS_COMMANDS.iter().any(|v| if v.ends_with('_') { name.starts_with(v) } else { name == *v })
}

/// The name of a `NAME=VALUE` word, when it has that shape.
pub(super) fn assigned_name(word: &str) -> Option<&str> {
    let (name, _) = word.split_once('=')?;
    let name = name.strip_suffix('+').unwrap_or(name);
    let ok =
        !name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then_some(name)
}

/// The refusal for assigning `name` where git will see it.
pub(super) fn env_refusal(name: &str) -> Effect {
    unparsed(format!("`{name}=…` names a command git would run, which the guard cannot follow"))
}

/// `git ARGS` run with the variables `assigns` set for it: push, the network subcommands,
/// config overrides, and what `clean`/`rm`/`mv`/`checkout`/`restore`/`reset`/`stash`/`switch`
/// remove or overwrite.
pub(super) fn git(args: &[Arg], sc: &Simple, assigns: &[String]) -> Vec<Effect> {
    let g = scan(
        args,
        &Spec {
            short_value: "Cc",
            long_value: &["git-dir", "work-tree", "namespace", "config-env", "super-prefix", "exec-path"],
            ..Spec::default()
        },
    );
    if g.has("c") || g.has("config-env") {
        let opt = if g.has("c") { "-c" } else { "--config-env" };
        return vec![unparsed(format!(
            "`git {opt}` overrides git's configuration, which can run commands (aliases, pagers, helpers, hooks) the guard cannot follow"
        ))];
    }
    if g.has("exec-path") {
        return vec![unparsed("`git --exec-path` chooses the programs git runs".into())];
    }
    if let Some(name) = assigns.iter().find(|n| runs_commands(n)) {
        return vec![env_refusal(name)];
    }
    let Some(&sub_i) = g.positionals.first() else { return Vec::new() };
    let Some(sub) = args[sub_i].literal() else {
        return vec![unparsed(format!("`git {}` is not a fixed subcommand", args[sub_i].source))];
    };
    let rest = &args[sub_i + 1..];
    let first_rest = || scan(rest, &Spec { permute: true, ..Spec::default() }).positionals.first().and_then(|&i| rest[i].literal());
    let network = |what: String| vec![Effect::Refuse(refusal("network", format!("`git {what}` reaches the network")))];
    match sub.as_str() {
        "push" => return vec![Effect::Refuse(refusal("push", "`git push` publishes commits to another repository".into()))],
        "fetch" | "pull" | "clone" | "ls-remote" | "send-email" | "request-pull" => return network(sub),
        "remote" if first_rest().as_deref() == Some("update") => return network("remote update".into()),
        "submodule" if matches!(first_rest().as_deref(), Some("update" | "add" | "sync")) => {
            return network(format!("submodule {}", first_rest().unwrap_or_default()))
        }
        "archive" if rest.iter().filter_map(Arg::text).any(|t| t.starts_with("--remote")) => return network("archive --remote".into()),
        "config" if !config_reads_only(rest) => {
            return vec![unparsed(
                "`git config` that sets a value can make later git commands run a program (`alias.x '!…'`, `core.pager`)".into(),
            )]
        }
        _ => {}
    }
    // `git -C DIR` runs in DIR: the targets below are relative to it.
    let cwds: Vec<String> = match g.value(args, "C") {
        None => sc.cwds.clone(),
        Some(dir) => match sc.cwds.iter().map(|c| dir.pattern(c)).collect::<Option<Vec<_>>>() {
            Some(c) => c,
            None => return vec![unparsed(format!("`git -C {}` runs in a folder that is only known when it runs", dir.source))],
        },
    };
    let targets = worktree_targets(&sub, rest);
    if targets.is_empty() {
        return Vec::new();
    }
    let moved = ["work-tree", "git-dir"]
        .into_iter()
        .find(|o| g.has(o))
        .map(|o| format!("--{o}"))
        .or_else(|| assigns.iter().find(|n| MOVES_TREE.contains(&n.as_str())).cloned());
    if let Some(m) = moved {
        return vec![unparsed(format!("`git {sub}` with `{m}` works on a tree the guard does not follow"))];
    }
    let what = match sub.as_str() {
        "reset" => "`git reset --hard`".to_string(),
        _ => format!("`git {sub}`"),
    };
    targets.into_iter().map(|(how, arg)| Effect::Target { how, arg, cwds: cwds.clone(), what: what.clone() }).collect()
}

/// Whether `git config REST` only reads: `--get…`/`--list`/`-l`, the `get`/`list` actions, or
/// one key alone, without an option that writes (`--unset`, `--add`, `-e`, …).
fn config_reads_only(rest: &[Arg]) -> bool {
    let s = scan(rest, &Spec { short_value: "f", long_value: &["file", "blob", "type", "default"], permute: true, ..Spec::default() });
    let reading = ["get", "get-all", "get-regexp", "get-urlmatch", "get-color", "get-colorbool", "list", "l"].iter().any(|o| s.has(o));
    let action = s.positionals.first().and_then(|&i| rest[i].literal());
    let writing = ["unset", "unset-all", "replace-all", "add", "rename-section", "remove-section", "edit", "e"].iter().any(|o| s.has(o));
    let one_key =
        s.positionals.len() == 1 && !matches!(action.as_deref(), Some("set" | "unset" | "rename-section" | "remove-section" | "edit"));
    !writing && (reading || matches!(action.as_deref(), Some("get" | "list")) || one_key)
}

/// The paths a subcommand deletes or overwrites; `.` stands for the whole working tree.
/// Checking out or restoring a path, a hard reset, `stash -u|-a` and a forced switch replace
/// or remove workspace files, so they count as deleting them.
fn worktree_targets(sub: &str, rest: &[Arg]) -> Vec<(Write, Arg)> {
    let whole = || vec![(Write::Delete, Arg::lit("."))];
    let each = |how: Write, idx: &[usize]| idx.iter().map(|&i| (how, rest[i].clone())).collect::<Vec<_>>();
    let scan_with = |short_value: &'static str, long_value: &'static [&'static str]| {
        scan(rest, &Spec { short_value, long_value, permute: true, ..Spec::default() })
    };
    match sub {
        "clean" => {
            let s = scan_with("e", &["exclude"]);
            if s.has("n") || s.has("dry-run") {
                Vec::new()
            } else if s.positionals.is_empty() {
                whole()
            } else {
                each(Write::Delete, &s.positionals)
            }
        }
        "rm" => {
            let s = scan_with("", &[]);
            if s.has("cached") {
                Vec::new()
            } else {
                each(Write::Delete, &s.positionals)
            }
        }
        "mv" => {
            let s = scan_with("", &[]);
            let Some((last, sources)) = s.positionals.split_last() else { return Vec::new() };
            let mut out = each(Write::Delete, sources);
            out.push((Write::Overwrite, rest[*last].clone()));
            out
        }
        // Every positional may be a path (`git checkout main` names `main`, which is harmless).
        "checkout" => {
            let s = scan_with("bB", &["orphan", "conflict", "pathspec-from-file"]);
            if s.has("pathspec-from-file") {
                whole()
            } else if s.has("f") || s.has("force") {
                let mut out = whole();
                out.extend(each(Write::Delete, &s.positionals));
                out
            } else {
                each(Write::Delete, &s.positionals)
            }
        }
        "restore" => {
            let s = scan_with("s", &["source", "conflict", "pathspec-from-file"]);
            let worktree = !(s.has("S") || s.has("staged")) || s.has("W") || s.has("worktree");
            match (worktree, s.has("pathspec-from-file")) {
                (false, _) => Vec::new(),
                (true, true) => whole(),
                (true, false) => each(Write::Delete, &s.positionals),
            }
        }
        "reset" => {
            let s = scan_with("", &[]);
            if s.has("hard") || s.has("merge") || s.has("keep") {
                whole()
            } else {
                Vec::new()
            }
        }
        "stash" => {
            let s = scan_with("m", &["message", "pathspec-from-file"]);
            if !(s.has("u") || s.has("a") || s.has("include-untracked") || s.has("all")) {
                return Vec::new();
            }
            let action = s.positionals.first().and_then(|&i| rest[i].literal());
            match action.as_deref() {
                Some("push") if s.positionals.len() > 1 && !s.has("pathspec-from-file") => each(Write::Delete, &s.positionals[1..]),
                None | Some("push" | "save") => whole(),
                // `git stash -u -- path` has no action word.
                Some(_) if !s.has("pathspec-from-file") => each(Write::Delete, &s.positionals),
                Some(_) => whole(),
            }
        }
        "switch" => {
            let s = scan_with("cC", &["orphan", "conflict"]);
            if s.has("f") || s.has("force") || s.has("discard-changes") {
                whole()
            } else {
                Vec::new()
            }
        }
        _ => Vec::new(),
    }
}
