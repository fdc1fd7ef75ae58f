//! A `run` line as the simple commands bash would run (docs/design.md §13 "split to argv").
//!
//! Owns: parsing with `brush-parser` (POSIX/bash grammar) and the walk over every list,
//! pipeline stage, compound command, function body, command and process substitution and
//! here-document, in source order, into [`Item`]s: each simple command with its words
//! evaluated as far as they can be without running anything ([`Arg`]), its writing redirects and
//! the working directories it may run in. `cd`/`pushd`/`popd` only ever add candidate
//! directories: a `cd` that fails leaves the old one, and a `cd` in a subshell is not undone, so
//! a target is checked against every directory it may be relative to. Must not classify
//! anything (that is `classify.rs`) nor touch the filesystem.

use brush_parser::ast::{self, Command, CompoundCommand, CompoundList, IoFileRedirectKind, IoFileRedirectTarget, IoRedirect};
use brush_parser::word::{self as bword, Parameter, ParameterExpr, TildeExpr, WordPiece, WordPieceWithSource};
use brush_parser::{Parser, ParserOptions};

use super::paths;

/// How deep `$(…)` and `bash -c` texts may nest, and how many wrapper programs may stand
/// around one command, before the line is refused as unparsed [chosen: no real command line
/// nests this deep].
pub(super) const MAX_DEPTH: usize = 8;

/// How deep brackets and compound commands may nest in one text before it is refused unparsed
/// without being parsed [chosen: the parser recurses per level; 128 levels overflow a 2 MiB
/// thread stack in a debug build, 64 do not].
pub(super) const MAX_NESTING: usize = 32;

/// The longest text parsed [chosen: 64 KiB; a wish's `run` is one command line].
pub(super) const MAX_BYTES: usize = 64 * 1024;

/// The source shown for a process substitution argument.
pub(super) const PROCESS_SUBSTITUTION: &str = "<(…)";

/// One piece of an evaluated word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Piece {
    /// Quoted or escaped text: taken as it is.
    Lit(String),
    /// Unquoted text: may hold glob or brace syntax.
    Glob(String),
    /// `~` or `$HOME` at the start of a word: some absolute directory, unknown at write time.
    Home,
    /// `$PWD`: the working directory the command runs in.
    Cwd,
    /// Anything else that expands (a variable, a substitution, arithmetic): unknown.
    Unknown,
}

/// A word of a command as bash would see it before expansion, evaluated as far as possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Arg {
    /// The word as written (for reasons).
    pub source: String,
    pub pieces: Vec<Piece>,
}

impl Arg {
    /// A word of fixed text (e.g. an option's attached value).
    pub(super) fn lit(text: &str) -> Self {
        Self { source: text.to_string(), pieces: vec![Piece::Lit(text.to_string())] }
    }

    /// An argument nobody can know at write time (what `xargs` appends).
    pub(super) fn unknown(source: &str) -> Self {
        Self { source: source.to_string(), pieces: vec![Piece::Unknown] }
    }

    /// Whether the word is a process substitution's `/dev/fd/N` (`<(…)`, `>(…)`).
    pub(super) fn is_process_substitution(&self) -> bool {
        self.source == PROCESS_SUBSTITUTION && self.pieces == [Piece::Unknown]
    }

    /// The fixed text before the first piece that expands (all of it for a fixed word).
    pub(super) fn leading_text(&self) -> String {
        let mut s = String::new();
        for p in &self.pieces {
            match p {
                Piece::Lit(t) | Piece::Glob(t) => s.push_str(t),
                Piece::Home | Piece::Cwd | Piece::Unknown => break,
            }
        }
        s
    }

    /// The text when no piece expands; glob syntax is kept as written.
    pub(super) fn text(&self) -> Option<String> {
        let mut s = String::new();
        for p in &self.pieces {
            match p {
                Piece::Lit(t) | Piece::Glob(t) => s.push_str(t),
                Piece::Home | Piece::Cwd | Piece::Unknown => return None,
            }
        }
        Some(s)
    }

    /// [`Arg::text`] when it is one fixed word: no expansion and no unquoted glob syntax.
    pub(super) fn literal(&self) -> Option<String> {
        let fixed = self.pieces.iter().all(|p| match p {
            Piece::Lit(_) => true,
            Piece::Glob(t) => !paths::has_glob(t),
            Piece::Home | Piece::Cwd | Piece::Unknown => false,
        });
        if fixed {
            self.text()
        } else {
            None
        }
    }

    /// The absolute glob pattern this word names when run in `cwd` (itself a pattern), or
    /// `None` when part of it cannot be known. Quoted text is escaped; unquoted text keeps its
    /// glob syntax.
    pub(super) fn pattern(&self, cwd: &str) -> Option<String> {
        self.raw_pattern(cwd).map(|s| paths::normalize_pattern(&s))
    }

    /// [`Arg::pattern`] before `.`/`..` are resolved (`/dev/fd/../x` stays so).
    pub(super) fn raw_pattern(&self, cwd: &str) -> Option<String> {
        let mut s = String::new();
        for (i, p) in self.pieces.iter().enumerate() {
            match p {
                Piece::Lit(t) => s.push_str(&globset::escape(t)),
                Piece::Glob(t) => s.push_str(t),
                Piece::Home if i == 0 => s.push_str("/**"),
                Piece::Cwd => s.push_str(cwd),
                Piece::Home | Piece::Unknown => return None,
            }
        }
        if !s.starts_with('/') {
            s = format!("{cwd}/{s}");
        }
        Some(s)
    }
}

/// How a redirect or a command writes a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Write {
    /// Removes it (`rm`, `mv`'s source, `find -delete`, …).
    Delete,
    /// Replaces its content (`>`, `cp`'s destination, `tee`, `sed -i`, …).
    Overwrite,
    /// Adds to or creates it without losing content (`>>`, `touch`, `mkdir`, `chmod`, …).
    Modify,
    /// Creates or replaces entries of unknown names inside the folder it names, which itself
    /// stays (`tar -x -C DIR`, `unzip -d DIR`, `patch -d DIR`).
    Into,
}

/// A simple command as it would run.
#[derive(Debug, Clone, Default)]
pub(super) struct Simple {
    /// Words after the assignments; may be empty (`> file` alone).
    pub argv: Vec<Arg>,
    /// Writing redirects, in order.
    pub writes: Vec<(Write, Arg)>,
    /// Files only read by redirects (`< file`), in order: `/dev/tcp/…` reaches the network.
    pub reads: Vec<Arg>,
    /// Fixed text given on stdin by a here-document or here-string (for `bash <<EOF`).
    pub stdin: Option<String>,
    /// Working directories it may run in: absolute glob patterns.
    pub cwds: Vec<String>,
    /// Names of the `NAME=VALUE` assignments before the command (or alone).
    pub assigns: Vec<String>,
}

/// What the walk found, in source order.
#[derive(Debug, Clone)]
pub(super) enum Item {
    Run(Simple),
    /// A construct that cannot be classified safely, and why.
    Unparsed(String),
}

/// Parses `text` (bash syntax) and lists what it runs. `cwds` are the candidate working
/// directories at its start (escaped absolute patterns); `home` is `$CICY_HOME` (`$CICY_HOME`
/// in a word is that text). A syntax error is one [`Item::Unparsed`].
pub(super) fn walk(text: &str, cwds: &[String], home: &str, depth: usize) -> Vec<Item> {
    let mut w = Walker { items: Vec::new(), cwds: cwds.to_vec(), home: home.to_string(), depth };
    w.text(text);
    w.items
}

fn options() -> ParserOptions {
    // extglob off: `@(a|b)` would need a matcher of its own; off, it is a syntax error and so
    // refused as unparsed rather than misread.
    ParserOptions { enable_extended_globbing: false, ..ParserOptions::default() }
}

/// Why `text` is not given to the parser: over [`MAX_BYTES`], or nested deeper than
/// [`MAX_NESTING`] counting `(`/`{` against `)`/`}` and `if`/`for`/`while`/`until`/`case`/`select`
/// against `fi`/`done`/`esac`. Quotes are not skipped, so the count is never below the real
/// depth.
fn too_big(text: &str) -> Option<String> {
    if text.len() > MAX_BYTES {
        return Some(format!("the command line is {} bytes (at most {MAX_BYTES})", text.len()));
    }
    let (mut depth, mut max) = (0usize, 0usize);
    for token in text.split(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|')) {
        for c in token.chars() {
            match c {
                '(' | '{' => depth += 1,
                ')' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            max = max.max(depth);
        }
        match token {
            "if" | "for" | "while" | "until" | "case" | "select" => depth += 1,
            "fi" | "done" | "esac" => depth = depth.saturating_sub(1),
            _ => {}
        }
        max = max.max(depth);
    }
    (max > MAX_NESTING).then(|| format!("the command line nests {max} levels deep (at most {MAX_NESTING})"))
}

struct Walker {
    items: Vec<Item>,
    cwds: Vec<String>,
    home: String,
    depth: usize,
}

impl Walker {
    fn unparsed(&mut self, why: String) {
        self.items.push(Item::Unparsed(why));
    }

    fn text(&mut self, text: &str) {
        if self.depth >= MAX_DEPTH {
            return self.unparsed(format!("nested more than {MAX_DEPTH} levels deep"));
        }
        if let Some(why) = too_big(text) {
            return self.unparsed(why);
        }
        self.depth += 1;
        let mut parser = Parser::new(std::io::Cursor::new(text.as_bytes()), &options());
        match parser.parse_program() {
            Ok(program) => program.complete_commands.iter().for_each(|c| self.list(c)),
            Err(e) => self.unparsed(format!("`{text}` is not a command line bash would run ({e})")),
        }
        self.depth -= 1;
    }

    fn list(&mut self, list: &CompoundList) {
        for ast::CompoundListItem(and_or, _) in &list.0 {
            self.pipeline(&and_or.first);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p),
                }
            }
        }
    }

    fn pipeline(&mut self, p: &ast::Pipeline) {
        p.seq.iter().for_each(|c| self.command(c));
    }

    fn command(&mut self, c: &Command) {
        match c {
            Command::Simple(s) => self.simple(s),
            Command::Compound(cc, redirects) => self.redirected(redirects.as_ref(), |w| w.compound(cc)),
            // The body is checked as if it ran: a function defined is a function called.
            Command::Function(f) => self.redirected(f.body.1.as_ref(), |w| w.compound(&f.body.0)),
            Command::ExtendedTest(t, redirects) => self.redirected(redirects.as_ref(), |w| w.test_expr(&t.expr)),
        }
    }

    /// Walks `body`, then lists the writing redirects of the compound command around it as a
    /// command of their own (`{ …; } > file`).
    fn redirected(&mut self, redirects: Option<&ast::RedirectList>, body: impl FnOnce(&mut Self)) {
        let mut sc = Simple::default();
        if let Some(r) = redirects {
            r.0.iter().for_each(|r| self.redirect(r, &mut sc));
        }
        body(self);
        if !sc.writes.is_empty() || !sc.reads.is_empty() {
            sc.cwds = self.cwds.clone();
            self.items.push(Item::Run(sc));
        }
    }

    fn test_expr(&mut self, e: &ast::ExtendedTestExpr) {
        match e {
            ast::ExtendedTestExpr::And(a, b) | ast::ExtendedTestExpr::Or(a, b) => {
                self.test_expr(a);
                self.test_expr(b);
            }
            ast::ExtendedTestExpr::Not(a) | ast::ExtendedTestExpr::Parenthesized(a) => self.test_expr(a),
            ast::ExtendedTestExpr::UnaryTest(_, w) => {
                self.word(w);
            }
            ast::ExtendedTestExpr::BinaryTest(_, a, b) => {
                self.word(a);
                self.word(b);
            }
        }
    }

    fn arithmetic(&mut self, text: &str) {
        if text.contains("$(") || text.contains('`') {
            self.unparsed(format!("a command substitution inside arithmetic `{text}`"));
        }
    }

    fn compound(&mut self, cc: &CompoundCommand) {
        match cc {
            CompoundCommand::Arithmetic(a) => self.arithmetic(&a.expr.value),
            CompoundCommand::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater].into_iter().flatten() {
                    self.arithmetic(&e.value);
                }
                self.list(&f.body.list);
            }
            CompoundCommand::BraceGroup(b) => self.list(&b.list),
            CompoundCommand::Subshell(s) => self.list(&s.list),
            CompoundCommand::ForClause(f) => {
                f.values.iter().flatten().for_each(|w| {
                    self.word(w);
                });
                self.list(&f.body.list);
            }
            CompoundCommand::CaseClause(c) => {
                self.word(&c.value);
                for item in &c.cases {
                    item.patterns.iter().for_each(|w| {
                        self.word(w);
                    });
                    if let Some(body) = &item.cmd {
                        self.list(body);
                    }
                }
            }
            CompoundCommand::IfClause(i) => {
                self.list(&i.condition);
                self.list(&i.then);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.list(c);
                    }
                    self.list(&e.body);
                }
            }
            CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                self.list(&w.0);
                self.list(&w.1.list);
            }
            CompoundCommand::Coprocess(c) => self.command(&c.body),
        }
    }

    fn simple(&mut self, s: &ast::SimpleCommand) {
        let mut sc = Simple::default();
        // Words in the order bash evaluates them: prefix, the name, the suffix; `None` is a
        // process substitution's `/dev/fd/N` argument.
        let mut words: Vec<Option<&ast::Word>> = Vec::new();
        for item in s.prefix.iter().flat_map(|p| p.0.iter()) {
            self.item(item, false, &mut sc, &mut words);
        }
        if let Some(name) = &s.word_or_name {
            words.push(Some(name));
        }
        for item in s.suffix.iter().flat_map(|x| x.0.iter()) {
            self.item(item, true, &mut sc, &mut words);
        }
        for w in words {
            let arg = match w {
                Some(w) => self.word(w),
                None => Arg::unknown(PROCESS_SUBSTITUTION),
            };
            sc.argv.push(arg);
        }
        sc.cwds = self.cwds.clone();
        self.change_dir(&sc);
        self.items.push(Item::Run(sc));
    }

    /// `cd DIR` / `pushd DIR` add DIR to the candidates; `cd` alone, `cd -`, `popd` or a
    /// directory that cannot be known add "any directory" (`/**`).
    fn change_dir(&mut self, sc: &Simple) {
        let Some(prog) = sc.argv.first().and_then(Arg::literal) else { return };
        if !matches!(prog.as_str(), "cd" | "pushd" | "popd") {
            return;
        }
        let dir = sc.argv[1..].iter().find(|a| !a.text().is_some_and(|t| t.starts_with('-') && t.len() > 1));
        let mut new = Vec::new();
        match (prog.as_str(), dir) {
            ("popd", _) | (_, None) => new.push("/**".to_string()),
            (_, Some(d)) if d.text().as_deref() == Some("-") => new.push("/**".to_string()),
            (_, Some(d)) => {
                for cwd in &self.cwds {
                    // A folder reached through `/proc` or `/dev/fd` links could be any folder.
                    let dir = d.raw_pattern(cwd).filter(|raw| !paths::through_alias(raw)).map(|raw| paths::normalize_pattern(&raw));
                    new.push(dir.unwrap_or_else(|| "/**".to_string()));
                }
            }
        }
        for n in new {
            if !self.cwds.contains(&n) {
                self.cwds.push(n);
            }
        }
    }

    /// One prefix or suffix item; `in_suffix`: a `NAME=VALUE` word there is an argument
    /// (`dd of=x`), not an assignment.
    fn item<'a>(
        &mut self,
        item: &'a ast::CommandPrefixOrSuffixItem,
        in_suffix: bool,
        sc: &mut Simple,
        words: &mut Vec<Option<&'a ast::Word>>,
    ) {
        match item {
            ast::CommandPrefixOrSuffixItem::IoRedirect(r) => self.redirect(r, sc),
            ast::CommandPrefixOrSuffixItem::Word(w) => words.push(Some(w)),
            ast::CommandPrefixOrSuffixItem::AssignmentWord(_, w) if in_suffix => words.push(Some(w)),
            ast::CommandPrefixOrSuffixItem::AssignmentWord(a, _) => {
                let (ast::AssignmentName::VariableName(name) | ast::AssignmentName::ArrayElementName(name, _)) = &a.name;
                sc.assigns.push(name.clone());
                match &a.value {
                    ast::AssignmentValue::Scalar(w) => {
                        self.word(w);
                    }
                    ast::AssignmentValue::Array(elems) => {
                        for (k, v) in elems {
                            if let Some(k) = k {
                                self.word(k);
                            }
                            self.word(v);
                        }
                    }
                }
            }
            ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                self.list(&sub.list);
                words.push(None);
            }
        }
    }

    fn redirect(&mut self, r: &IoRedirect, sc: &mut Simple) {
        match r {
            IoRedirect::File(_, kind, target) => {
                let how = match kind {
                    IoFileRedirectKind::Write | IoFileRedirectKind::Clobber => Some(Write::Overwrite),
                    IoFileRedirectKind::Append | IoFileRedirectKind::ReadAndWrite => Some(Write::Modify),
                    // `>&file` (bash: stdout and stderr to a file) unless it names a descriptor.
                    IoFileRedirectKind::DuplicateOutput => Some(Write::Overwrite),
                    IoFileRedirectKind::Read | IoFileRedirectKind::DuplicateInput => None,
                };
                match target {
                    IoFileRedirectTarget::Filename(w) => {
                        let arg = self.word(w);
                        match how {
                            Some(how) => sc.writes.push((how, arg)),
                            None => sc.reads.push(arg),
                        }
                    }
                    IoFileRedirectTarget::Duplicate(w) => {
                        let arg = self.word(w);
                        let is_fd = arg.literal().is_some_and(|t| t.trim_end_matches('-').bytes().all(|b| b.is_ascii_digit()));
                        match (how, is_fd) {
                            (_, true) => {}
                            (Some(how), false) => sc.writes.push((how, arg)),
                            (None, false) => sc.reads.push(arg),
                        }
                    }
                    IoFileRedirectTarget::Fd(_) => {}
                    IoFileRedirectTarget::ProcessSubstitution(_, sub) => self.list(&sub.list),
                }
            }
            IoRedirect::OutputAndError(w, append) => {
                let arg = self.word(w);
                sc.writes.push((if *append { Write::Modify } else { Write::Overwrite }, arg));
            }
            IoRedirect::HereString(_, w) => {
                let arg = self.word(w);
                sc.stdin = arg.text();
            }
            IoRedirect::HereDocument(_, doc) => {
                if !doc.requires_expansion {
                    sc.stdin = Some(doc.doc.value.clone());
                    return;
                }
                match bword::parse_heredoc(&doc.doc.value, &options()) {
                    Ok(pieces) => {
                        let mut out = Vec::new();
                        self.pieces(&pieces, &doc.doc.value, true, &mut out);
                        sc.stdin = Arg { source: doc.doc.value.clone(), pieces: out }.text();
                    }
                    Err(e) => self.unparsed(format!("a here-document bash would not expand ({e})")),
                }
            }
        }
    }

    /// Evaluates a word; its command substitutions are walked (they run first).
    fn word(&mut self, w: &ast::Word) -> Arg {
        let mut out = Vec::new();
        match bword::parse(&w.value, &options()) {
            Ok(pieces) => self.pieces(&pieces, &w.value, false, &mut out),
            Err(e) => {
                self.unparsed(format!("the word `{}` does not parse ({e})", w.value));
                out.push(Piece::Unknown);
            }
        }
        Arg { source: w.value.clone(), pieces: out }
    }

    fn pieces(&mut self, pieces: &[WordPieceWithSource], src: &str, quoted: bool, out: &mut Vec<Piece>) {
        for p in pieces {
            let piece = match &p.piece {
                WordPiece::Text(t) if quoted => Piece::Lit(t.clone()),
                WordPiece::Text(t) => Piece::Glob(t.clone()),
                WordPiece::SingleQuotedText(t) => Piece::Lit(t.clone()),
                WordPiece::AnsiCQuotedText(t) if t.contains('\\') => Piece::Unknown,
                WordPiece::AnsiCQuotedText(t) => Piece::Lit(t.clone()),
                WordPiece::DoubleQuotedSequence(inner) | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, src, true, out);
                    continue;
                }
                WordPiece::TildeExpansion(TildeExpr::Home) => Piece::Home,
                WordPiece::TildeExpansion(_) => Piece::Unknown,
                WordPiece::ParameterExpansion(expr) => {
                    let text = src.get(p.start_index..p.end_index).unwrap_or(src);
                    if text.contains("$(") || text.contains('`') {
                        self.unparsed(format!("a command substitution inside `{text}`"));
                    }
                    match expr {
                        ParameterExpr::Parameter { parameter: Parameter::Named(n), indirect: false } => match n.as_str() {
                            "HOME" => Piece::Home,
                            "PWD" => Piece::Cwd,
                            "CICY_HOME" => Piece::Lit(self.home.clone()),
                            _ => Piece::Unknown,
                        },
                        _ => Piece::Unknown,
                    }
                }
                WordPiece::CommandSubstitution(t) | WordPiece::BackquotedCommandSubstitution(t) => {
                    self.text(t);
                    Piece::Unknown
                }
                WordPiece::EscapeSequence(s) => Piece::Lit(s.strip_prefix('\\').unwrap_or(s).to_string()),
                WordPiece::ArithmeticExpression(e) => {
                    self.arithmetic(&e.value);
                    Piece::Unknown
                }
            };
            out.push(piece);
        }
    }
}
