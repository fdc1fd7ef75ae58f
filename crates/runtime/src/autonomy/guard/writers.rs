//! Programs that write files named by their options or arguments, beyond the core utilities of
//! `classify.rs` (docs/design.md §13 "program + target"): in-place editors (`perl -i`, `awk -i
//! inplace`, `vim`, `ed`), `sort -o`, `patch`, archive extraction (`tar -x`, `unzip`), and
//! `find`'s actions.
//! Owns which arguments of theirs are written and how; must not judge the paths (that is
//! `classify::check_target`).

use super::classify::{unparsed, Effect};
use super::opts::{scan, Spec};
use super::shell::{Arg, Item, Simple, Write};

/// The paths `name args` writes, or `None` when `name` is not one of these programs.
pub(super) fn writes(name: &str, args: &[Arg], sc: &Simple) -> Option<Vec<Effect>> {
    let w = Writer { name, sc };
    Some(match name {
        "perl" => w.perl(args),
        "awk" | "gawk" => w.awk(args),
        "sort" => w.sort(args),
        "patch" => w.patch(args),
        "vim" | "vi" | "nvim" | "ex" | "view" | "vimdiff" | "ed" | "red" => w.editor(args),
        "tar" | "gtar" | "bsdtar" => w.tar(args),
        "unzip" => w.unzip(args),
        _ => return None,
    })
}

struct Writer<'a> {
    name: &'a str,
    sc: &'a Simple,
}

impl Writer<'_> {
    fn target(&self, how: Write, arg: &Arg, cwds: &[String]) -> Effect {
        Effect::Target { how, arg: arg.clone(), cwds: cwds.to_vec(), what: format!("`{}`", self.name) }
    }

    fn each(&self, how: Write, args: &[Arg], idx: &[usize], cwds: &[String]) -> Vec<Effect> {
        idx.iter().map(|&i| self.target(how, &args[i], cwds)).collect()
    }

    /// The working directories after `chdir(dir)` (`patch -d`, `tar -C`, `unzip -d`), or the
    /// refusal when `dir` is only known when it runs.
    fn cwds_in(&self, dir: &Arg) -> Result<Vec<String>, Effect> {
        self.sc
            .cwds
            .iter()
            .map(|c| dir.pattern(c))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| unparsed(format!("`{}` writes into `{}`, a folder only known when it runs", self.name, dir.source)))
    }

    /// `perl -i[EXT] [-e CODE | SCRIPT] FILE…` rewrites each FILE.
    fn perl(&self, args: &[Arg]) -> Vec<Effect> {
        let s = scan(args, &Spec { short_value: "eEI", short_optional: "iMml0xCdDFV", ..Spec::default() });
        if !s.has("i") {
            return Vec::new();
        }
        let code_given = s.has("e") || s.has("E");
        let files = if code_given { &s.positionals[..] } else { s.positionals.get(1..).unwrap_or_default() };
        self.each(Write::Overwrite, args, files, &self.sc.cwds)
    }

    /// `gawk -i inplace [-f FILE | PROGRAM] FILE…` rewrites each FILE (`VAR=VALUE` operands
    /// are assignments).
    fn awk(&self, args: &[Arg]) -> Vec<Effect> {
        let s = scan(
            args,
            &Spec {
                short_value: "fvFiElLW",
                long_value: &["file", "assign", "field-separator", "include", "exec", "load", "source"],
                ..Spec::default()
            },
        );
        let inplace =
            s.values(args, "i").chain(s.values(args, "include")).any(|v| v.text().is_none_or(|t| t == "inplace" || t == "inplace.awk"));
        if !inplace {
            return Vec::new();
        }
        let program_given = ["f", "E", "file", "exec", "source"].iter().any(|o| s.has(o));
        let operands = if program_given { &s.positionals[..] } else { s.positionals.get(1..).unwrap_or_default() };
        let is_assignment = |a: &Arg| {
            a.text().and_then(|t| t.split_once('=').map(|(n, _)| n.to_string())).is_some_and(|n| {
                !n.is_empty() && !n.starts_with(|c: char| c.is_ascii_digit()) && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        };
        let files: Vec<usize> = operands.iter().copied().filter(|&i| !is_assignment(&args[i])).collect();
        self.each(Write::Overwrite, args, &files, &self.sc.cwds)
    }

    /// `sort -o FILE` writes FILE; `--compress-program` runs a program.
    fn sort(&self, args: &[Arg]) -> Vec<Effect> {
        let s = scan(
            args,
            &Spec {
                short_value: "kotST",
                long_value: &[
                    "key",
                    "output",
                    "field-separator",
                    "buffer-size",
                    "temporary-directory",
                    "parallel",
                    "batch-size",
                    "compress-program",
                    "files0-from",
                    "random-source",
                    "sort",
                ],
                permute: true,
                ..Spec::default()
            },
        );
        if s.has("compress-program") {
            return vec![unparsed("`sort --compress-program` runs a program the guard does not follow".into())];
        }
        s.values(args, "o").chain(s.values(args, "output")).map(|o| self.target(Write::Overwrite, &o, &self.sc.cwds)).collect()
    }

    /// `patch [-d DIR] [FILE [PATCHFILE]] [-o OUT] [-r REJECTS]`: writes into DIR (the files
    /// the diff names), FILE, OUT and REJECTS, all relative to DIR.
    fn patch(&self, args: &[Arg]) -> Vec<Effect> {
        let s = scan(
            args,
            &Spec {
                short_value: "BdDFgiopVrYz",
                long_value: &[
                    "backup-prefix",
                    "directory",
                    "ifdef",
                    "fuzz",
                    "get",
                    "input",
                    "output",
                    "strip",
                    "reject-file",
                    "version-control",
                    "basename-prefix",
                    "suffix",
                    "quoting-style",
                    "reject-format",
                ],
                permute: true,
                ..Spec::default()
            },
        );
        let dir = s.value(args, "d").or_else(|| s.value(args, "directory")).unwrap_or_else(|| Arg::lit("."));
        let cwds = match self.cwds_in(&dir) {
            Ok(c) => c,
            Err(e) => return vec![e],
        };
        let mut out = vec![self.target(Write::Into, &dir, &self.sc.cwds)];
        out.extend(s.positionals.first().map(|&i| self.target(Write::Overwrite, &args[i], &cwds)));
        for opt in ["o", "output", "r", "reject-file"] {
            out.extend(s.values(args, opt).filter(|v| v.text().as_deref() != Some("-")).map(|v| self.target(Write::Overwrite, &v, &cwds)));
        }
        out
    }

    /// `vim FILE…`, `ed FILE`: each FILE may be rewritten. Editor commands (`-c`, `--cmd`,
    /// `+CMD`, or a stdin script with `!`) can run programs and are refused as unparsed.
    fn editor(&self, args: &[Arg]) -> Vec<Effect> {
        let name = self.name;
        let ed = matches!(name, "ed" | "red");
        let ex_mode = name == "ex" || args.iter().filter_map(Arg::literal).any(|t| t.starts_with("-e") || t.starts_with("-E"));
        let short_value = match (ed, ex_mode) {
            (true, _) => "p",
            (false, true) => "cSTtuUiwWq",
            (false, false) => "cSsTtuUiwWq",
        };
        let s = scan(args, &Spec { short_value, short_optional: if ed { "" } else { "rV" }, long_value: &["cmd"], permute: true });
        let plus = s.positionals.iter().any(|&i| args[i].text().is_none_or(|t| t.starts_with('+')));
        if (!ed && (s.has("c") || s.has("cmd"))) || plus || self.sc.stdin.as_deref().is_some_and(|t| t.contains('!')) {
            return vec![unparsed(format!("`{name}` runs editor commands, which can run programs the guard does not follow"))];
        }
        let mut out = self.each(Write::Overwrite, args, &s.positionals, &self.sc.cwds);
        out.extend(s.values(args, "W").map(|v| self.target(Write::Overwrite, &v, &self.sc.cwds)));
        out.extend(s.values(args, "w").map(|v| self.target(Write::Modify, &v, &self.sc.cwds)));
        out
    }

    /// `tar -x [-C DIR] [MEMBER…]` writes into DIR (the current folder by default);
    /// `-c`/`-r`/`-u`/`-A`/`--delete` write the archive `-f FILE`. The old form `tar xzf A` is
    /// read as `tar -x -z -f A`. Options that run a program are refused as unparsed.
    fn tar(&self, args: &[Arg]) -> Vec<Effect> {
        let mut argv: Vec<Arg> = Vec::new();
        for (i, a) in args.iter().enumerate() {
            match a.literal() {
                Some(t) if i == 0 && !t.starts_with('-') && !t.is_empty() && t.chars().all(|c| c.is_ascii_alphabetic()) => {
                    argv.extend(t.chars().map(|c| Arg::lit(&format!("-{c}"))));
                }
                _ => argv.push(a.clone()),
            }
        }
        let args = &argv[..];
        let s = scan(
            args,
            &Spec {
                short_value: "fCbHKLNgTVXI",
                long_value: &[
                    "file",
                    "directory",
                    "blocking-factor",
                    "format",
                    "starting-file",
                    "tape-length",
                    "newer",
                    "listed-incremental",
                    "files-from",
                    "label",
                    "exclude-from",
                    "use-compress-program",
                    "to-command",
                    "info-script",
                    "new-volume-script",
                    "checkpoint-action",
                    "exclude",
                    "transform",
                    "owner",
                    "group",
                    "mode",
                    "mtime",
                ],
                permute: true,
                ..Spec::default()
            },
        );
        let compressor = |v: Arg| {
            v.literal().is_some_and(|t| {
                ["gzip", "bzip2", "xz", "zstd", "lz4", "lzip", "lzma", "lzop", "pigz", "pbzip2", "pixz"].contains(&t.as_str())
            })
        };
        if let Some(o) = ["to-command", "info-script", "new-volume-script", "checkpoint-action", "F"].into_iter().find(|o| s.has(o)) {
            let shown = if o.len() == 1 { format!("-{o}") } else { format!("--{o}") };
            return vec![unparsed(format!("`{} {shown}` runs a program the guard does not follow", self.name))];
        }
        if s.values(args, "I").chain(s.values(args, "use-compress-program")).any(|v| !compressor(v)) {
            return vec![unparsed(format!("`{} --use-compress-program` runs a program the guard does not follow", self.name))];
        }
        let archive = s.value(args, "f").or_else(|| s.value(args, "file"));
        let archive_written = |how: Write| {
            archive.iter().filter(|a| a.text().as_deref() != Some("-")).map(|a| self.target(how, a, &self.sc.cwds)).collect::<Vec<_>>()
        };
        if s.has("c") || s.has("create") {
            return archive_written(Write::Overwrite);
        }
        if ["r", "u", "A", "append", "update", "catenate", "concatenate", "delete"].iter().any(|o| s.has(o)) {
            return archive_written(Write::Modify);
        }
        if !(s.has("x") || s.has("extract") || s.has("get")) || s.has("O") || s.has("to-stdout") {
            return Vec::new();
        }
        let dir = s.value(args, "C").or_else(|| s.value(args, "directory")).unwrap_or_else(|| Arg::lit("."));
        let cwds = match self.cwds_in(&dir) {
            Ok(c) => c,
            Err(e) => return vec![e],
        };
        let mut out = vec![self.target(Write::Into, &dir, &self.sc.cwds)];
        out.extend(self.each(Write::Overwrite, args, &s.positionals, &cwds));
        out
    }

    /// `unzip ZIP [MEMBER…] [-d DIR]` writes into DIR (the current folder by default); the
    /// listing, testing and to-stdout modes write nothing.
    fn unzip(&self, args: &[Arg]) -> Vec<Effect> {
        let s = scan(args, &Spec { short_value: "dP", permute: true, ..Spec::default() });
        if ["l", "t", "v", "Z", "z", "p", "c"].iter().any(|o| s.has(o)) {
            return Vec::new();
        }
        let dir = s.value(args, "d").unwrap_or_else(|| Arg::lit("."));
        let cwds = match self.cwds_in(&dir) {
            Ok(c) => c,
            Err(e) => return vec![e],
        };
        let mut out = vec![self.target(Write::Into, &dir, &self.sc.cwds)];
        out.extend(self.each(Write::Overwrite, args, s.positionals.get(1..).unwrap_or_default(), &cwds));
        out
    }
}

/// `find START… EXPR`: `-delete` removes what is under each start; `-exec`/`-execdir`/`-ok`
/// commands run with `{}` standing for each start (the whole tree they may reach);
/// `-fprint`-style actions write a file.
pub(super) fn find(args: &[Arg], sc: &Simple) -> Vec<Effect> {
    let mut i = 0;
    // Leading options -H -L -P -D … -O…
    while args.get(i).and_then(Arg::text).is_some_and(|t| matches!(t.as_str(), "-H" | "-L" | "-P") || t.starts_with("-O")) {
        i += 1;
    }
    if args.get(i).and_then(Arg::text).as_deref() == Some("-D") {
        i += 2;
    }
    let mut starts = Vec::new();
    while let Some(a) = args.get(i) {
        if a.text().is_some_and(|t| t.starts_with('-') || t == "(" || t == "!") {
            break;
        }
        starts.push(a.clone());
        i += 1;
    }
    if starts.is_empty() {
        starts.push(Arg::lit("."));
    }
    let what = "`find`".to_string();
    let mut out = Vec::new();
    while let Some(a) = args.get(i) {
        i += 1;
        let Some(t) = a.text() else { continue };
        match t.as_str() {
            "-delete" => out.extend(starts.iter().map(|s| Effect::Target {
                how: Write::Delete,
                arg: s.clone(),
                cwds: sc.cwds.clone(),
                what: what.clone(),
            })),
            "-fprint" | "-fprint0" | "-fls" | "-fprintf" => {
                if let Some(f) = args.get(i) {
                    out.push(Effect::Target { how: Write::Overwrite, arg: f.clone(), cwds: sc.cwds.clone(), what: what.clone() });
                }
            }
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let end = args[i..].iter().position(|a| matches!(a.text().as_deref(), Some(";" | "+"))).map_or(args.len(), |p| i + p);
                let inner = &args[i..end];
                for start in &starts {
                    let argv = inner.iter().map(|a| if a.text().as_deref() == Some("{}") { start.clone() } else { a.clone() }).collect();
                    out.push(Effect::Nested(vec![Item::Run(Simple { argv, cwds: sc.cwds.clone(), ..Simple::default() })]));
                }
                i = end + 1;
            }
            _ => {}
        }
    }
    out
}
