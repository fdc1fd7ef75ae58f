//! Option scanning of one command's arguments, getopt style (docs/design.md §13 "program + target").
//!
//! Owns: telling options, their values and positional arguments apart, given which short
//! letters and long names take a value. Must not know any program's meaning.

use super::shell::Arg;

/// What a program's options look like.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Spec {
    /// Short letters that take a value, attached (`-tDIR`) or as the next argument (`-t DIR`).
    pub short_value: &'static str,
    /// Short letters whose value, if any, is attached (`sed -i.bak`, `xargs -i`).
    pub short_optional: &'static str,
    /// Long names (without `--`) that take the next argument as their value unless `=` gives it.
    pub long_value: &'static [&'static str],
    /// GNU permutation: options may follow positionals. Off for wrappers (`nice -n 5 rm -f x`:
    /// everything from the first positional on belongs to the command run).
    pub permute: bool,
}

/// An option's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Val {
    Attached(String),
    /// The index of the argument holding it.
    Next(usize),
}

/// One option: `name` is the short letter or the long name without `--`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Opt {
    pub name: String,
    pub value: Option<Val>,
}

/// The options and positionals of an argument list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Scan {
    pub opts: Vec<Opt>,
    /// Indices of positional arguments (an argument that cannot be known is positional).
    pub positionals: Vec<usize>,
}

impl Scan {
    /// Whether option `name` (short letter or long name) was given.
    pub(super) fn has(&self, name: &str) -> bool {
        self.opts.iter().any(|o| o.name == name)
    }

    /// The value of the last option `name`, as an argument.
    pub(super) fn value(&self, args: &[Arg], name: &str) -> Option<Arg> {
        self.values(args, name).last()
    }

    /// The values of every option `name`, in order.
    pub(super) fn values<'a>(&'a self, args: &'a [Arg], name: &'a str) -> impl Iterator<Item = Arg> + 'a {
        self.opts.iter().filter(move |o| o.name == name).filter_map(|o| match &o.value {
            Some(Val::Attached(t)) => Some(Arg::lit(t)),
            Some(Val::Next(i)) => args.get(*i).cloned(),
            None => None,
        })
    }
}

/// Scans `args` (the arguments after the program name).
pub(super) fn scan(args: &[Arg], spec: &Spec) -> Scan {
    let mut out = Scan::default();
    let mut i = 0;
    while i < args.len() {
        let text = args[i].text();
        match text.as_deref() {
            Some("--") => {
                out.positionals.extend(i + 1..args.len());
                break;
            }
            Some(s) if s.starts_with("--") => {
                let body = &s[2..];
                let (name, value) = match body.split_once('=') {
                    Some((n, v)) => (n, Some(Val::Attached(v.to_string()))),
                    None if spec.long_value.contains(&body) && i + 1 < args.len() => {
                        i += 1;
                        (body, Some(Val::Next(i)))
                    }
                    None => (body, None),
                };
                out.opts.push(Opt { name: name.to_string(), value });
            }
            Some(s) if s.starts_with('-') && s.len() > 1 => {
                for (k, ch) in s[1..].char_indices() {
                    let rest = &s[1 + k + ch.len_utf8()..];
                    if spec.short_value.contains(ch) {
                        let value = if !rest.is_empty() {
                            Some(Val::Attached(rest.to_string()))
                        } else if i + 1 < args.len() {
                            i += 1;
                            Some(Val::Next(i))
                        } else {
                            None
                        };
                        out.opts.push(Opt { name: ch.to_string(), value });
                        break;
                    }
                    if spec.short_optional.contains(ch) {
                        let value = (!rest.is_empty()).then(|| Val::Attached(rest.to_string()));
                        out.opts.push(Opt { name: ch.to_string(), value });
                        break;
                    }
                    out.opts.push(Opt { name: ch.to_string(), value: None });
                }
            }
            _ => {
                if !spec.permute {
                    out.positionals.extend(i..args.len());
                    break;
                }
                out.positionals.push(i);
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<Arg> {
        s.split_whitespace().map(Arg::lit).collect()
    }

    #[test]
    fn short_long_values_and_permutation() {
        let a = args("-rf -t dir a --suffix=x b -- -c");
        let s = scan(&a, &Spec { short_value: "t", long_value: &["suffix"], permute: true, ..Spec::default() });
        assert_eq!(s.positionals, vec![3, 5, 7]);
        assert!(s.has("r") && s.has("f") && s.has("suffix"));
        assert_eq!(s.value(&a, "t"), Some(Arg::lit("dir")));
        let a = args("-n 5 rm -f x");
        let s = scan(&a, &Spec { short_value: "n", ..Spec::default() });
        assert_eq!(s.positionals, vec![2, 3, 4]);
        let a = args("-i.bak -e s/a/b/ f");
        let s = scan(&a, &Spec { short_value: "e", short_optional: "i", permute: true, ..Spec::default() });
        assert_eq!(s.value(&a, "i"), Some(Arg::lit(".bak")));
        assert_eq!(s.positionals, vec![3]);
    }
}
