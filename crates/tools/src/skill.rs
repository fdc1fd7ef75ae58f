//! The `skill` tool and the installed-skills list: project skills in
//! `<workspace>/.cicy/skills/<folder>/SKILL.md` over global ones in
//! `$CICY_HOME/skills/<folder>/SKILL.md` (docs/design.md §12, CMDC "project > global").
//!
//! Owns finding installed skills, reading their YAML front matter (`name`, `description`,
//! `allowed_tools`, also spelt `allowed-tools`, a list or a comma-separated string) and the tool's list and read results. Read-only: it never installs, edits
//! or removes a skill, and it knows nothing of prompt assembly beyond handing [`list_skills`]
//! to the assembler. A skill the tool reads becomes active for `super::skill_guard`.
//!
//! A skill is a folder under a skills dir holding a `SKILL.md` file. Folders whose name starts
//! with `.` or is not UTF-8 are not skills. A project skill replaces a global one of the same
//! listed name. A UTF-8 BOM and CRLF line ends are accepted; text is returned with the BOM
//! removed and line ends as `\n`.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use super::output::{decode_lossy, invalid_utf8_note};
use super::{ToolContext, ToolOutput};

pub const NAME: &str = "skill";

/// One installed skill as the list shows it: both fields are single-line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillInfo {
    /// `name` from the front matter, else the folder name.
    pub name: String,
    /// `description` from the front matter (may be empty), or a note in parentheses saying why
    /// the SKILL.md could not be read or parsed.
    pub description: String,
}

/// The tool description shown to the model.
pub fn description() -> &'static str {
    "Read installed skills: folders of instructions for particular kinds of task. Call with no \
     `name` to list them (`- name: description`), or with a `name` from that list to get the \
     skill's whole SKILL.md, then follow it."
}

/// JSON Schema of the input: `name` (string, optional).
pub fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "description": "The skill to read, as listed. Omit to list installed skills."
            }
        }
    })
}

/// The `skill` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Skill;

crate::module_tool!(Skill);

/// Without `name` (or with `null`): the list of installed skills, one `- name: description`
/// line each in folder-name order, or a "no skills installed" text; never an error. With
/// `name`: the whole SKILL.md of the skill whose folder, or else front-matter name, equals it,
/// followed by an `[note: N bytes were not valid UTF-8 …]` line when the file has such bytes.
/// Errors: `name` not a string, empty, containing `/`, `\` or `..`, or starting with `.`; no
/// such skill (the error lists the installed names); an unreadable file; a SKILL.md whose front
/// matter does not parse (the error gives the parse error; the skill does not become active).
pub async fn run(input: &Value, ctx: &ToolContext) -> ToolOutput {
    match input.get("name") {
        None | Some(Value::Null) => ToolOutput::ok(list_text(&ctx.skills_dir, &project_dir(&ctx.workspace))),
        Some(Value::String(name)) => read_skill(ctx, name),
        Some(other) => ToolOutput::error(format!("invalid input: \"name\" must be a string, got {other}")),
    }
}

/// `<workspace>/.cicy/skills`: the project's skills, which win over `$CICY_HOME/skills`.
pub fn project_dir(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("skills")
}

/// Installed skills of `global` (`$CICY_HOME/skills`) and `project` ([`project_dir`]) sorted
/// by folder name (byte order; a project skill first on a tie), for the system prompt's skills
/// block. A project skill replaces every global one with the same listed name. A missing or
/// unreadable skills dir gives no skills. The same files always give the same list, so the
/// prompt bytes stay stable.
pub fn list_skills(global: &Path, project: &Path) -> Vec<SkillInfo> {
    scan_all(global, project).into_iter().map(|skill| skill.info).collect()
}

/// A skill, the folder it was found in (which may differ from its front-matter name) and the
/// skills dir holding that folder.
pub(crate) struct Installed {
    folder: String,
    dir: PathBuf,
    pub(crate) info: SkillInfo,
    /// Front-matter `allowed_tools` (`None`: not given, the skill restricts nothing).
    pub(crate) allowed_tools: Option<Vec<String>>,
    /// Why its SKILL.md could not be read or its front matter parsed (`None`: it was). Such a
    /// skill is listed with the problem but cannot be read or become active: what it meant to
    /// allow is unknown, so under `skill_guard: strict` it must not lift the guard.
    pub(crate) problem: Option<String>,
}

/// Both layers merged as [`list_skills`] describes.
pub(crate) fn scan_all(global: &Path, project: &Path) -> Vec<Installed> {
    let mut skills = scan(project);
    let shadowed: Vec<String> = skills.iter().map(|s| s.info.name.clone()).collect();
    skills.extend(scan(global).into_iter().filter(|s| !shadowed.contains(&s.info.name)));
    // Stable: on a tie the project skill, pushed first, stays first.
    skills.sort_by(|a, b| a.folder.cmp(&b.folder));
    skills
}

/// The skill `name` names: by folder first, else by listed name.
pub(crate) fn find<'a>(skills: &'a [Installed], name: &str) -> Option<&'a Installed> {
    skills.iter().find(|skill| skill.folder == name).or_else(|| skills.iter().find(|skill| skill.info.name == name))
}

fn scan(skills_dir: &Path) -> Vec<Installed> {
    let Ok(entries) = fs::read_dir(skills_dir) else {
        return Vec::new();
    };
    let mut skills: Vec<Installed> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let folder = entry.file_name().into_string().ok()?;
            let path = entry.path().join("SKILL.md");
            // `is_file` follows symlinks, so a skill linked in from elsewhere counts.
            (!folder.starts_with('.') && path.is_file()).then(|| {
                let (info, allowed_tools, problem) = read_info(&folder, &path);
                Installed { info, allowed_tools, problem, folder, dir: skills_dir.to_path_buf() }
            })
        })
        .collect();
    skills.sort_by(|a, b| a.folder.cmp(&b.folder));
    skills
}

fn read_info(folder: &str, path: &Path) -> (SkillInfo, Option<Vec<String>>, Option<String>) {
    let parsed = match fs::read(path) {
        Ok(bytes) => front_matter(&normalize(&bytes)),
        Err(err) => Err(format!("SKILL.md could not be read: {err}")),
    };
    match parsed {
        Ok(front) => {
            let name = one_line(front.name.as_deref().unwrap_or_default());
            let info = SkillInfo {
                name: if name.is_empty() { folder.to_owned() } else { name },
                description: one_line(front.description.as_deref().unwrap_or_default()),
            };
            (info, front.allowed_tools.map(|t| t.0), None)
        }
        Err(problem) => {
            let problem = one_line(&problem);
            let info = SkillInfo { name: folder.to_owned(), description: format!("({problem})") };
            (info, None, Some(problem))
        }
    }
}

/// The front-matter fields the runtime reads; others (`license`, `metadata`, …) are ignored.
#[derive(Debug, Default, Deserialize)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
    /// CMDC SkillGuard: the tools this skill allows (Claude Code spells it `allowed-tools`).
    #[serde(alias = "allowed-tools")]
    allowed_tools: Option<ToolList>,
}

/// `allowed_tools` as a YAML list (`[ls, read_file]`) or, as Claude Code writes it, one string
/// split on commas and whitespace (`ls, read_file`); empty pieces are dropped.
#[derive(Debug)]
struct ToolList(Vec<String>);

impl<'de> Deserialize<'de> for ToolList {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ToolList;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of tool names or a string of names separated by commas")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ToolList, E> {
                let names = text.split(|c: char| c == ',' || c.is_whitespace()).filter(|t| !t.is_empty());
                Ok(ToolList(names.map(str::to_owned).collect()))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<ToolList, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(ToolList(names))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// Parses a leading `---` … `---` block. Text without one has empty front matter; an
/// unterminated block or bad YAML is an error text.
fn front_matter(text: &str) -> Result<FrontMatter, String> {
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Ok(FrontMatter::default());
    }
    let mut yaml = String::new();
    for line in lines {
        if line.trim_end() == "---" {
            if yaml.trim().is_empty() {
                return Ok(FrontMatter::default());
            }
            return serde_yaml::from_str(&yaml).map_err(|err| format!("front matter could not be parsed: {err}"));
        }
        yaml.push_str(line);
    }
    Err("front matter has no closing `---` line".to_owned())
}

/// Lossy UTF-8 without a BOM and with `\n` line ends.
fn normalize(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.strip_prefix('\u{feff}').unwrap_or(&text).replace("\r\n", "\n")
}

/// Collapses whitespace runs (a folded YAML description, a multi-line error) to single spaces.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn list_text(global: &Path, project: &Path) -> String {
    let skills = list_skills(global, project);
    if skills.is_empty() {
        return "No skills installed.".to_owned();
    }
    let mut text = "Installed skills (read one with {\"name\": \"<name>\"}):".to_owned();
    for skill in &skills {
        text.push_str("\n- ");
        text.push_str(&skill.name);
        if !skill.description.is_empty() {
            text.push_str(": ");
            text.push_str(&skill.description);
        }
    }
    text
}

/// Reads skill `name` and, when it was read, makes it active for `super::skill_guard`.
fn read_skill(ctx: &ToolContext, name: &str) -> ToolOutput {
    if name.is_empty() {
        return ToolOutput::error("invalid input: \"name\" must not be empty");
    }
    // The name becomes a path component: nothing may step outside the skills dir.
    if name.contains(['/', '\\']) || name.contains("..") || name.starts_with('.') {
        return ToolOutput::error(format!(
            "invalid input: \"name\" must be a skill name without \"/\", \"\\\", \"..\" or a \
             leading \".\", got {name:?}"
        ));
    }
    let skills = scan_all(&ctx.skills_dir, &project_dir(&ctx.workspace));
    let Some(skill) = find(&skills, name) else {
        let names: Vec<&str> = skills.iter().map(|skill| skill.info.name.as_str()).collect();
        let installed =
            if names.is_empty() { "no skills are installed".to_owned() } else { format!("installed skills: {}", names.join(", ")) };
        return ToolOutput::error(format!("unknown skill {name:?}; {installed}"));
    };
    let path = skill.dir.join(&skill.folder).join("SKILL.md");
    if let Some(problem) = &skill.problem {
        return ToolOutput::error(format!(
            "skill {:?} cannot be used: its {problem}; fix {} (the skill is not active)",
            skill.info.name,
            path.display()
        ));
    }
    match fs::read(&path) {
        Ok(bytes) => {
            let mut text = normalize(&bytes);
            if let Some(note) = invalid_utf8_note(decode_lossy(&bytes).1) {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(&note);
            }
            super::skill_guard::activate(ctx, &skill.info.name, skill.allowed_tools.clone());
            ToolOutput::ok(text)
        }
        Err(err) => ToolOutput::error(format!("could not read {}: {err}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(skills_dir: &Path) -> ToolContext {
        ToolContext {
            skills_dir: skills_dir.into(),
            hidden_env: vec!["CICY_TEST_SECRET".to_string()],
            ..ToolContext::for_tests(skills_dir)
        }
    }

    fn install(skills_dir: &Path, folder: &str, text: &str) {
        fs::create_dir_all(skills_dir.join(folder)).unwrap();
        fs::write(skills_dir.join(folder).join("SKILL.md"), text).unwrap();
    }

    fn info(name: &str, description: &str) -> SkillInfo {
        SkillInfo { name: name.to_owned(), description: description.to_owned() }
    }

    fn output(content: &str, is_error: bool) -> ToolOutput {
        ToolOutput { content: content.to_owned(), is_error }
    }

    #[test]
    fn a_missing_or_empty_skills_dir_lists_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(list_skills(&dir.path().join("missing"), &dir.path().join("none")), []);
        assert_eq!(list_skills(dir.path(), &dir.path().join("none")), []);
    }

    #[test]
    fn skills_are_listed_in_folder_order_with_front_matter_names_and_fallbacks() {
        let dir = tempfile::tempdir().unwrap();
        let skills = dir.path();
        install(skills, "b-pdf", "---\nname: pdf\ndescription: Fill PDF forms.\n---\n# PDF\n");
        install(skills, "a-plain", "# No front matter\n");
        install(skills, "c-unnamed", "---\ndescription: >\n  Folded\n  text.\n---\nbody\n");
        install(skills, "d-empty", "---\n---\nbody\n");
        install(skills, "e-extra", "---\nname: ' x '\nlicense: MIT\nmetadata: {a: 1}\n---\n");
        install(skills, ".hidden", "---\nname: hidden\n---\n");
        fs::create_dir(skills.join("no-skill-md")).unwrap();
        fs::write(skills.join("README.md"), "not a skill").unwrap();
        let expected =
            [info("a-plain", ""), info("pdf", "Fill PDF forms."), info("c-unnamed", "Folded text."), info("d-empty", ""), info("x", "")];
        assert_eq!(list_skills(skills, &skills.join("none")), expected);
    }

    #[test]
    fn a_project_skill_replaces_a_global_one_of_the_same_name() {
        let dir = tempfile::tempdir().unwrap();
        let (global, project) = (dir.path().join("home-skills"), project_dir(dir.path()));
        install(&global, "pdf", "---\nname: pdf\ndescription: Global PDF.\n---\n");
        install(&global, "zeta", "---\ndescription: Global only.\n---\n");
        install(&project, "b-pdf", "---\nname: pdf\ndescription: Project PDF.\nallowed_tools: [shell]\n---\nproject body\n");
        install(&project, "alpha", "---\nallowed-tools: [read_file, grep]\n---\n");
        let expected = [info("alpha", ""), info("pdf", "Project PDF."), info("zeta", "Global only.")];
        assert_eq!(list_skills(&global, &project), expected);
        let all = scan_all(&global, &project);
        let allowed: Vec<Option<Vec<String>>> = all.iter().map(|s| s.allowed_tools.clone()).collect();
        assert_eq!(allowed, [Some(vec!["read_file".to_string(), "grep".to_string()]), Some(vec!["shell".to_string()]), None]);
    }

    #[tokio::test]
    async fn the_tool_reads_the_project_skill_over_the_global_one() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext { skills_dir: dir.path().join("home-skills"), ..ToolContext::for_tests(dir.path()) };
        install(&ctx.skills_dir, "pdf", "---\nname: pdf\n---\nglobal body\n");
        let project = "---\nname: pdf\n---\nproject body\n";
        install(&project_dir(dir.path()), "pdf", project);
        assert_eq!(run(&json!({"name": "pdf"}), &ctx).await, output(project, false));
        let listing = "Installed skills (read one with {\"name\": \"<name>\"}):\n- pdf";
        assert_eq!(run(&json!({}), &ctx).await, output(listing, false));
    }

    #[test]
    fn a_bom_and_crlf_line_ends_are_tolerated() {
        let dir = tempfile::tempdir().unwrap();
        install(dir.path(), "win", "\u{feff}---\r\nname: win\r\ndescription: CRLF.\r\n---\r\nx\r\n");
        assert_eq!(list_skills(dir.path(), &dir.path().join("none")), [info("win", "CRLF.")]);
    }

    #[test]
    fn a_broken_skill_md_is_listed_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        install(dir.path(), "bad-yaml", "---\ndescription: use when: editing\n---\n");
        install(dir.path(), "ok", "---\nname: ok\ndescription: Fine.\n---\n");
        install(dir.path(), "unclosed", "---\nname: unclosed\n");
        install(dir.path(), "wrong-type", "---\nname: [a, b]\n---\n");
        // YAML positions count from the first line inside the `---` block.
        let unparsable = "(front matter could not be parsed: ";
        let expected = [
            info("bad-yaml", &format!("{unparsable}mapping values are not allowed in this context at line 1 column 22)")),
            info("ok", "Fine."),
            info("unclosed", "(front matter has no closing `---` line)"),
            info("wrong-type", &format!("{unparsable}name: invalid type: sequence, expected a string at line 1 column 7)")),
        ];
        assert_eq!(list_skills(dir.path(), &dir.path().join("none")), expected);
    }

    #[tokio::test]
    async fn without_a_name_the_tool_lists_installed_skills() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        assert_eq!(run(&json!({}), &ctx).await, output("No skills installed.", false));
        install(dir.path(), "pdf", "---\nname: pdf\ndescription: Fill PDF forms.\n---\n");
        install(dir.path(), "notes", "just text\n");
        let listing = "Installed skills (read one with {\"name\": \"<name>\"}):\n\
                       - notes\n\
                       - pdf: Fill PDF forms.";
        assert_eq!(run(&json!({}), &ctx).await, output(listing, false));
        assert_eq!(run(&json!({"name": null}), &ctx).await, output(listing, false));
    }

    #[tokio::test]
    async fn with_a_name_the_tool_returns_the_whole_skill_md() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let text = "---\nname: pdf\ndescription: Fill PDF forms.\n---\n# PDF\n\nSteps.\n";
        install(dir.path(), "pdf-tools", text);
        install(dir.path(), "win", "\u{feff}---\r\nname: win\r\n---\r\nbody\r\n");
        assert_eq!(run(&json!({"name": "pdf-tools"}), &ctx).await, output(text, false));
        assert_eq!(run(&json!({"name": "pdf"}), &ctx).await, output(text, false));
        let win = "---\nname: win\n---\nbody\n";
        assert_eq!(run(&json!({"name": "win"}), &ctx).await, output(win, false));
        fs::create_dir(dir.path().join("latin1")).unwrap();
        fs::write(dir.path().join("latin1/SKILL.md"), b"caf\xe9 cr\xe8me").unwrap();
        let latin1 = "caf\u{fffd} cr\u{fffd}me\n[note: 2 bytes were not valid UTF-8 and are shown as \u{fffd}]";
        assert_eq!(run(&json!({"name": "latin1"}), &ctx).await, output(latin1, false));
    }

    #[tokio::test]
    async fn bad_or_unknown_names_are_error_results() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let unknown = "unknown skill \"pdf\"; no skills are installed";
        assert_eq!(run(&json!({"name": "pdf"}), &ctx).await, output(unknown, true));
        install(dir.path(), "b", "---\nname: beta\n---\n");
        install(dir.path(), "a", "---\nname: alpha\n---\n");
        let unknown = "unknown skill \"pdf\"; installed skills: alpha, beta";
        assert_eq!(run(&json!({"name": "pdf"}), &ctx).await, output(unknown, true));
        let empty = "invalid input: \"name\" must not be empty";
        assert_eq!(run(&json!({"name": ""}), &ctx).await, output(empty, true));
        let not_string = "invalid input: \"name\" must be a string, got 3";
        assert_eq!(run(&json!({"name": 3}), &ctx).await, output(not_string, true));
        for name in ["a/b", "a\\b", "..", "../a", "a..b", ".hidden", "."] {
            let rejected = format!(
                "invalid input: \"name\" must be a skill name without \"/\", \"\\\", \"..\" or a \
                 leading \".\", got {name:?}"
            );
            assert_eq!(run(&json!({"name": name}), &ctx).await, output(&rejected, true));
        }
    }

    #[test]
    fn allowed_tools_may_be_a_claude_code_style_string() {
        let dir = tempfile::tempdir().unwrap();
        install(dir.path(), "a", "---\nallowed-tools: ls, read_file\n---\n");
        install(dir.path(), "b", "---\nallowed_tools: \"grep  glob,,shell\"\n---\n");
        install(dir.path(), "c", "---\nallowed-tools: [ls]\n---\n");
        install(dir.path(), "d", "---\nallowed-tools: {ls: 1}\n---\n");
        let all = scan_all(dir.path(), &dir.path().join("none"));
        let got: Vec<(Option<Vec<String>>, Option<String>)> = all.iter().map(|s| (s.allowed_tools.clone(), s.problem.clone())).collect();
        let tools = |t: &[&str]| Some(t.iter().map(|t| t.to_string()).collect::<Vec<_>>());
        let bad = "front matter could not be parsed: allowed-tools: invalid type: map, expected a list of tool names or a string of names separated by commas at line 1 column 16";
        assert_eq!(
            got,
            [
                (tools(&["ls", "read_file"]), None),
                (tools(&["grep", "glob", "shell"]), None),
                (tools(&["ls"]), None),
                (None, Some(bad.to_string()))
            ]
        );
    }

    #[tokio::test]
    async fn a_skill_whose_front_matter_does_not_parse_is_not_read_and_not_activated() {
        let dir = tempfile::tempdir().unwrap();
        let guard = std::sync::Arc::new(super::super::skill_guard::Guard::for_tests(super::super::skill_guard::Mode::Strict));
        let ctx = ToolContext { skill_guard: Some(guard), ..context(dir.path()) };
        install(dir.path(), "ok", "---\nallowed-tools: ls\n---\n");
        install(dir.path(), "bad", "---\ndescription: use when: editing\nallowed-tools: ls\n---\nbody\n");
        assert_eq!(run(&json!({"name": "ok"}), &ctx).await, output("---\nallowed-tools: ls\n---\n", false));
        let refused = format!(
            "skill \"bad\" cannot be used: its front matter could not be parsed: mapping values are not allowed in this context at line 1 column 22; fix {} (the skill is not active)",
            dir.path().join("bad/SKILL.md").display()
        );
        assert_eq!(run(&json!({"name": "bad"}), &ctx).await, output(&refused, true));
        // The guard still allows only `ok`'s tools: the broken skill lifted nothing.
        let blocked = super::super::skill_guard::refusal(&ctx, "shell").map(|o| o.content);
        assert_eq!(blocked.as_deref(), Some("error: tool 'shell' is not in the active skills' allowed_tools (ls)"));
    }
}
