//! The one table of built-in tools: each name and how to make its tool.
//!
//! Owns the list. It sits above `tools`, `wake` and `messages`, so none of those needs to know
//! another's tools: `ToolSet::new` is given this table, and `ToolConfig::load` (cicy-config,
//! which knows no tool) its names. Adding a built-in tool is one line here.

use std::sync::Arc;

use crate::autonomy::wish_tool as wish;
use crate::messages::tools as coordinate;
use crate::tools::{ask_user, files, plan, shell, skill, task, Builtin, Tool};
use crate::wake::tools as wake;

/// Makes the unit-struct tool `T`, whatever its name (`make` of a tool that is one type).
fn unit<T: Tool + Default + 'static>(_: &str) -> Option<Arc<dyn Tool>> {
    Some(Arc::new(T::default()))
}

const fn entry(name: &'static str, make: fn(&str) -> Option<Arc<dyn Tool>>) -> Builtin {
    Builtin { name, make }
}

/// Every built-in tool, in the order an error lists them.
pub static BUILTIN: &[Builtin] = &[
    entry(shell::NAME, unit::<shell::Shell>),
    entry(skill::NAME, unit::<skill::Skill>),
    entry(wake::TODO, wake::builtin),
    entry(wake::SLEEP_UNTIL, wake::builtin),
    entry(wake::REPLY, wake::builtin),
    entry(wake::SEND, wake::builtin),
    entry(wake::INBOX, wake::builtin),
    entry(coordinate::MSG, coordinate::builtin),
    entry(coordinate::BROADCAST, coordinate::builtin),
    entry(coordinate::FORK, coordinate::builtin),
    entry(coordinate::AGENTS, coordinate::builtin),
    entry(task::NAME, unit::<task::Task>),
    entry(ask_user::NAME, unit::<ask_user::AskUser>),
    entry(plan::NAME, unit::<plan::WriteTodos>),
    entry(files::READ_FILE, files::builtin),
    entry(files::WRITE_FILE, files::builtin),
    entry(files::EDIT_FILE, files::builtin),
    entry(files::GREP, files::builtin),
    entry(files::GLOB, files::builtin),
    entry(files::LS, files::builtin),
    entry(wish::NAME, unit::<wish::Wish>),
];

/// The names of [`BUILTIN`], for `ToolConfig::load`.
pub fn names() -> Vec<&'static str> {
    BUILTIN.iter().map(|b| b.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::home::Home;
    use crate::role::{self, ToolConfig};

    #[test]
    fn every_entry_makes_the_tool_it_names_and_no_name_repeats() {
        for b in BUILTIN {
            let tool = (b.make)(b.name).unwrap_or_else(|| panic!("{} makes no tool", b.name));
            assert_eq!(tool.name(), b.name);
        }
        let mut names = names();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), BUILTIN.len());
        assert_eq!(BUILTIN.len(), 21);
    }

    #[test]
    fn packaged_roles_load_with_their_tools() {
        let d = tempfile::tempdir().unwrap();
        let h = Home::at(d.path());
        let tc = ToolConfig::load(&h, names()).unwrap();
        let a = role::load_template(&h, "assistant", &tc).unwrap();
        let with_wake = vec!["inbox", "reply", "send", "shell", "skill", "sleep_until", "todo"];
        assert_eq!(a.tools, with_wake);
        assert_eq!(a.max_tool_rounds(), 200);
        let c = role::load_template(&h, "concierge", &tc).unwrap();
        assert!(c.tools.is_empty());
        let coordinating = vec!["agents", "broadcast", "fork", "inbox", "msg", "reply", "send", "shell", "skill", "sleep_until", "todo"];
        assert_eq!(role::load_template(&h, "coordinator", &tc).unwrap().tools, coordinating);
        let developer = [
            "ask_user",
            "edit_file",
            "glob",
            "grep",
            "inbox",
            "ls",
            "read_file",
            "reply",
            "send",
            "shell",
            "skill",
            "sleep_until",
            "task",
            "todo",
            "wish",
            "write_file",
            "write_todos",
        ];
        assert_eq!(role::load_template(&h, "developer", &tc).unwrap().tools, developer);
        assert_eq!(role::list_templates(&h), vec!["assistant", "concierge", "coordinator", "developer"]);
    }
}
