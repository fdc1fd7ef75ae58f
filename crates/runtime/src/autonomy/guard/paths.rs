//! Path targets of a `run` line and the places the guard protects (docs/design.md §13).
//!
//! Owns: lexical normalisation, the glob pattern a shell word stands for, and the questions
//! "may this pattern name that path, an ancestor of it, or something inside it". Every target
//! is a glob over absolute, lexically normalised paths: a literal path is a pattern without
//! wildcards, `*.md` or `.cicy/mem*` keep their wildcards, and the home directory (`~`,
//! `$HOME`), unknown when a wish is written, is `/**` (any absolute directory). Must not touch
//! the filesystem: nothing here reads a file, follows a symlink or asks the environment.

use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};

/// `path` with `.` and `..` resolved lexically (`..` above `/` stays at `/`); relative paths
/// stay relative.
pub(super) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Normalises a glob pattern's components the same way: empty and `.` components dropped,
/// `..` pops the previous one. The result starts with `/` when `pattern` does.
pub(super) fn normalize_pattern(pattern: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in pattern.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    if pattern.starts_with('/') {
        format!("/{joined}")
    } else {
        joined
    }
}

/// Whether an unquoted piece of a word has glob syntax (`*`, `?`, `[`, or a `{a,b}` brace
/// expansion, which bash expands before the command runs and a glob alternation matches alike).
pub(super) fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '[']) || (s.contains('{') && s.contains('}') && (s.contains(',') || s.contains("..")))
}

/// Whether `raw` (an absolute pattern before `.`/`..` are resolved) goes through a link the
/// kernel makes: anything under `/proc` (`/proc/self/cwd`, `/proc/<pid>/root`, …), below or
/// beside `/dev/fd` (`/dev/fd/../x`, `/dev/fd/3/x`; `/dev/fd/N` itself is a descriptor), or
/// below `/dev/stdin|stdout|stderr`. Lexical normalisation would read `/dev/fd/../.cicy` as
/// `/dev/.cicy`, which it is not. A component with wildcards counts when it may match; `**`
/// (a home directory) never does.
pub(super) fn through_alias(raw: &str) -> bool {
    let comps: Vec<&str> = raw.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    let mut stack: Vec<&str> = Vec::new();
    for (i, c) in comps.iter().enumerate() {
        let rest = &comps[i..];
        let under = match stack.as_slice() {
            [p, ..] if may_be(p, "proc") => true,
            [d, f] if may_be(d, "dev") && may_be(f, "fd") => {
                !(rest.len() == 1 && !rest[0].is_empty() && rest[0].bytes().all(|b| b.is_ascii_digit()))
            }
            [d, s] if may_be(d, "dev") && ["stdin", "stdout", "stderr"].iter().any(|n| may_be(s, n)) => true,
            _ => false,
        };
        if under {
            return true;
        }
        if *c == ".." {
            stack.pop();
        } else {
            stack.push(c);
        }
    }
    false
}

/// Whether the pattern component `comp` may name `name`.
fn may_be(comp: &str, name: &str) -> bool {
    if comp == "**" {
        return false;
    }
    if !has_glob(comp) {
        return unescape(comp) == name;
    }
    GlobBuilder::new(comp).build().map_or(true, |g| g.compile_matcher().is_match(name))
}

/// A path a command names, as a glob over absolute normalised paths.
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// The normalised pattern, e.g. `/ws/.cicy/mem*`.
    pub pattern: String,
    matcher: GlobMatcher,
    /// The components before the first one with a wildcard, as a path.
    prefix: PathBuf,
    /// Whether every component is literal.
    literal: bool,
    /// The last component when it is literal.
    last: Option<String>,
}

impl Target {
    /// Errors: [`BadPattern`], when it is not a glob globset can compile (e.g. an unbalanced
    /// `{`).
    pub(super) fn new(pattern: &str) -> Result<Self, BadPattern> {
        let pattern = normalize_pattern(pattern);
        // A brace with a `/` inside spans components; such a word is rare and cut into pieces
        // by the component split below, so it is not guessed at.
        let matcher = GlobBuilder::new(&pattern)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|_| BadPattern(pattern.clone()))?
            .compile_matcher();
        let mut prefix = PathBuf::from("/");
        let mut literal = true;
        let mut last = None;
        for c in pattern.split('/').filter(|c| !c.is_empty()) {
            let wild = has_glob(c);
            if literal && !wild {
                prefix.push(unescape(c));
            }
            literal &= !wild;
            last = (!wild).then(|| unescape(c));
        }
        Ok(Self { pattern, matcher, prefix, literal, last })
    }

    /// The last component when it is literal (e.g. `config.yaml` of `/**/config.yaml`).
    pub(super) fn file_name(&self) -> Option<&str> {
        self.last.as_deref()
    }

    /// Whether the pattern may name `path` itself.
    pub(super) fn matches(&self, path: &Path) -> bool {
        self.matcher.is_match(path)
    }

    /// Whether the pattern may name `path` or one of its ancestors (up to `/`).
    pub(super) fn at_or_above(&self, path: &Path) -> bool {
        path.ancestors().any(|a| self.matches(a))
    }

    /// Whether the pattern names something strictly inside `dir`: its fixed prefix lies
    /// inside `dir`, or is `dir` with wildcards after it. The prefix alone decides: `~/x`
    /// (`/**/x`) is not taken to be inside the workspace, since a home directory is never
    /// inside an agent's `.cicy/`.
    pub(super) fn inside(&self, dir: &Path) -> bool {
        self.prefix.starts_with(dir) && (self.prefix != dir || !self.literal)
    }

    /// [`Target::matches`] or [`Target::inside`].
    pub(super) fn at_or_inside(&self, dir: &Path) -> bool {
        self.matches(dir) || self.inside(dir)
    }
}

/// A normalised pattern globset cannot compile; its text is the pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(super) struct BadPattern(pub String);

/// A glob component with its backslash escapes removed (globset's [`globset::escape`] form).
fn unescape(c: &str) -> String {
    let mut out = String::with_capacity(c.len());
    let mut chars = c.chars();
    while let Some(ch) = chars.next() {
        if ch == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(ch);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_is_lexical() {
        assert_eq!(normalize(Path::new("/ws/a/../.cicy/./memory")), PathBuf::from("/ws/.cicy/memory"));
        assert_eq!(normalize(Path::new("/../..")), PathBuf::from("/"));
        assert_eq!(normalize_pattern("/ws/sub/../.cicy//mem*"), "/ws/.cicy/mem*");
        assert_eq!(normalize_pattern("/ws/.."), "/");
    }

    #[test]
    fn patterns_answer_the_three_questions() {
        let mem = Path::new("/ws/.cicy/memory");
        let t = Target::new("/ws/.cicy/*").unwrap();
        assert!(t.matches(mem) && t.at_or_above(mem));
        let t = Target::new("/ws/.cicy/mem*").unwrap();
        assert!(t.matches(mem));
        let t = Target::new("/**").unwrap();
        assert!(t.at_or_above(mem));
        let t = Target::new("/").unwrap();
        assert!(t.at_or_above(mem) && !t.matches(mem));
        let t = Target::new("/ws/.cicy/memory/MEMORY.md").unwrap();
        assert!(t.inside(mem) && !t.at_or_above(mem));
        let t = Target::new("/**/MEMORY.md").unwrap();
        assert!(!t.inside(mem) && !t.matches(mem));
        let t = Target::new("/ws/.cicy/memory/*.md").unwrap();
        assert!(t.inside(mem) && !t.matches(mem));
        let t = Target::new("/ws/notes.txt").unwrap();
        assert!(!t.at_or_inside(mem) && !t.at_or_above(mem));
        let t = Target::new(&format!("{}/*", globset::escape("/ws/a[1]"))).unwrap();
        assert!(t.matches(Path::new("/ws/a[1]/x")) && !t.matches(Path::new("/ws/a1/x")));
        assert_eq!(Target::new("/ws/{a,b").unwrap_err(), BadPattern("/ws/{a,b".into()));
    }

    #[test]
    fn kernel_links_are_seen_before_normalisation() {
        for raw in ["/proc/self/cwd/.cicy", "/dev/fd/../.cicy", "/dev/fd/3/x", "/dev/./fd/../x", "/pr?c/1/root", "/dev/stdout/../x"] {
            assert!(through_alias(raw), "{raw}");
        }
        for raw in ["/dev/fd/2", "/dev/stderr", "/dev/null", "/**/proc/x", "/ws/proc/x", "/ws/.cicy"] {
            assert!(!through_alias(raw), "{raw}");
        }
    }
}
