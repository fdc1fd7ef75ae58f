//! Package managers, network programs and the runtime's own CLI (docs/design.md §13 "network
//! egress", "installing dependencies", "change the kernel"): which command lines of theirs are
//! refused. Owns those lists; must not look at paths (that is `classify.rs`).

use super::classify::{refusal, unparsed, Effect};
use super::opts::{scan, Spec};
use super::shell::Arg;

/// Programs that only reach other machines (docs/design.md §13 "network egress").
pub(super) const NETWORK: &[&str] = &[
    "curl",
    "wget",
    "ssh",
    "scp",
    "sftp",
    "rsync",
    "nc",
    "ncat",
    "netcat",
    "telnet",
    "ftp",
    "lftp",
    "socat",
    "aria2c",
    "http",
    "https",
    "xh",
    "mosh",
    "gh",
    "ping",
    "traceroute",
    "dig",
    "nslookup",
    "whois",
];

/// Programs that run another program (given as arguments, a string, stdin, a schedule or a
/// session) in a way the guard does not follow: refused as `unparsed`. The simple wrappers
/// (`env`, `nice`, `setsid`, `ionice`, `busybox`, …) are looked through instead.
pub(super) const RUNS_OTHERS: &[&str] = &[
    "chrt",
    "taskset",
    "flock",
    "watch",
    "strace",
    "ltrace",
    "script",
    "su",
    "runuser",
    "systemd-run",
    "parallel",
    "unshare",
    "nsenter",
    "chroot",
    "firejail",
    "bwrap",
    "tmux",
    "screen",
    "at",
    "batch",
    "crontab",
    "expect",
    "sg",
    "newgrp",
    "pkexec",
    "setpriv",
    "prlimit",
    "cpulimit",
    "systemd-nspawn",
    "xvfb-run",
    "unbuffer",
    "fakeroot",
    "faketime",
    "valgrind",
    "gdb",
    "rlwrap",
    "torsocks",
    "proxychains",
    "proxychains4",
];

/// The subcommand words of `name args`: its positionals, without cargo's `+toolchain`.
fn words(name: &str, args: &[Arg]) -> Vec<Option<String>> {
    let s = scan(args, &Spec { permute: true, ..Spec::default() });
    let mut w: Vec<Option<String>> = s.positionals.iter().map(|&i| args[i].literal()).collect();
    if matches!(name, "cargo" | "rustup") && w.first().and_then(Option::as_deref).is_some_and(|t| t.starts_with('+')) {
        w.remove(0);
    }
    w
}

/// The command line `name args` names when it publishes a package or image, e.g. `npm
/// publish`, `cargo publish`, `twine upload`, `docker push`.
pub(super) fn publishes(name: &str, args: &[Arg]) -> Option<String> {
    let w = words(name, args);
    let sub = w.first().cloned().flatten()?;
    let hit = match name {
        "npm" | "pnpm" | "yarn" | "bun" | "cargo" | "poetry" | "uv" | "pdm" | "hatch" | "flit" => {
            sub == "publish" || (name == "yarn" && sub == "npm" && w.get(1).cloned().flatten().as_deref() == Some("publish"))
        }
        "twine" => sub == "upload",
        "docker" | "podman" | "buildah" => sub == "push",
        "gem" => sub == "push",
        _ => false,
    };
    hit.then(|| format!("{name} {sub}"))
}

/// The package-manager command line `name args` names when it installs something, e.g.
/// `pip install`, `python3 -m pip install`, `npm ci`, `cargo add`, bare `yarn`, `npx`,
/// `apt-get update`.
pub(super) fn installs(name: &str, args: &[Arg]) -> Option<String> {
    let w = words(name, args);
    let word = |n: usize| w.get(n).cloned().flatten();
    let sub = word(0);
    let is = |subs: &[&str]| sub.as_deref().is_some_and(|x| subs.contains(&x));
    let versioned = |stem: &str| name.strip_prefix(stem).is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'));
    let hit = match name {
        _ if versioned("pip") => is(&["install", "download"]),
        "pipx" => is(&["install", "inject", "upgrade", "run", "reinstall", "reinstall-all", "upgrade-all"]),
        // They fetch a package and run it.
        "npx" | "pnpx" | "bunx" | "uvx" => return Some(name.to_string()),
        "deno" => is(&["install", "add"]),
        "rustup" => {
            is(&["install", "update"])
                || (is(&["toolchain", "target", "component"]) && matches!(word(1).as_deref(), Some("install" | "add")))
        }
        _ if versioned("python") => {
            // `python -m pip install …` (also `-mpip`).
            let m = args.iter().position(|a| a.literal().as_deref() == Some("-m"));
            let module = match m {
                Some(i) => args.get(i + 1).and_then(Arg::literal),
                None => args.iter().filter_map(Arg::literal).find_map(|t| t.strip_prefix("-m").map(str::to_string)),
            };
            let after = m.map_or(1, |i| i + 2);
            return (module.as_deref() == Some("pip") && args.iter().skip(after).filter_map(Arg::literal).any(|t| t == "install"))
                .then(|| format!("{name} -m pip install"));
        }
        "uv" => is(&["add", "sync"]) || (is(&["pip", "tool"]) && matches!(word(1).as_deref(), Some("install" | "sync"))),
        "npm" => is(&["install", "i", "in", "ci", "add", "isntall", "update", "up", "exec", "x"]),
        "pnpm" | "bun" => is(&["install", "i", "add", "update", "up", "dlx"]),
        "yarn" => sub.is_none() || is(&["install", "add", "up", "upgrade", "dlx"]),
        "cargo" => is(&["install", "add"]),
        "apt" | "apt-get" | "aptitude" => is(&["install", "update", "upgrade", "full-upgrade", "dist-upgrade"]),
        "dnf" | "yum" | "zypper" | "brew" | "snap" | "gem" | "conda" | "mamba" | "micromamba" => is(&["install"]),
        "apk" => is(&["add"]),
        "go" => is(&["install", "get"]),
        "poetry" | "pdm" => is(&["add", "install"]),
        "composer" => is(&["require", "install"]),
        "pacman" => args.iter().filter_map(Arg::literal).any(|t| t.starts_with("-S") || t == "--sync"),
        "dpkg" => args.iter().filter_map(Arg::literal).any(|t| t == "-i" || t == "--install"),
        _ => false,
    };
    hit.then(|| match (name, sub) {
        ("yarn", None) => "yarn".to_string(),
        ("pacman", _) => "pacman -S".to_string(),
        ("dpkg", _) => "dpkg -i".to_string(),
        ("uv", Some(sub)) if sub == "pip" || sub == "tool" => format!("uv {sub} {}", word(1).unwrap_or_default()),
        (_, Some(sub)) => format!("{name} {sub}"),
        (_, None) => name.to_string(),
    })
}

/// `cicy-agent`: only the read-only subcommands may run.
pub(super) fn cicy_agent(args: &[Arg]) -> Vec<Effect> {
    if args.iter().filter_map(Arg::literal).any(|t| matches!(t.as_str(), "-h" | "--help" | "-V" | "--version")) {
        return Vec::new();
    }
    let s = scan(
        args,
        &Spec {
            long_value: &[
                "at",
                "file",
                "role-template",
                "role",
                "model",
                "master",
                "workspace",
                "api-style",
                "label",
                "from",
                "thread",
                "before",
                "limit",
                "members",
                "description",
                "title",
                "timeout",
                "keep",
                "port",
                "bind",
            ],
            permute: true,
            ..Spec::default()
        },
    );
    let word = |n: usize| s.positionals.get(n).map(|&i| &args[i]);
    let Some(sub) = word(0) else { return Vec::new() };
    let (Some(sub), action) = (sub.literal(), word(2).and_then(Arg::literal)) else {
        return vec![unparsed(format!("`cicy-agent {}` is not a fixed subcommand", sub.source))];
    };
    let group_action = word(1).and_then(Arg::literal);
    let read_only = match sub.as_str() {
        "ls" | "roles" | "show" | "status" | "history" | "inbox" | "time" | "msgs" | "help" => true,
        "memory" => matches!(action.as_deref(), Some("ls" | "show" | "check" | "search")),
        "todo" | "checkpoint" => action.as_deref() == Some("ls"),
        "intents" => matches!(action.as_deref(), Some("ls" | "status")) || (action.as_deref() == Some("tick") && s.has("dry-run")),
        "group" => matches!(group_action.as_deref(), Some("messages" | "tasks")),
        _ => false,
    };
    if read_only {
        return Vec::new();
    }
    let shown = match (sub.as_str(), &action, &group_action) {
        ("memory" | "todo" | "checkpoint" | "intents", Some(a), _) => format!("{sub} {a}"),
        ("group", _, Some(a)) => format!("{sub} {a}"),
        _ => sub.clone(),
    };
    vec![Effect::Refuse(refusal(
        "kernel",
        format!("`cicy-agent {shown}` changes the runtime's state (only read-only subcommands may run)"),
    ))]
}
