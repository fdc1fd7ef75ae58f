//! What a chat line asks for: a conversation command (`/compact`, `/clear`, `/exit`), a
//! message for the model, or a mistyped command that must be neither sent nor run. Parsing
//! only; `chat` runs what it asks for.

/// A conversation command typed as a chat line (`/compact`, `/clear`, `/exit`, the whole line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChatCommand {
    Compact,
    Clear,
    Exit,
}

impl ChatCommand {
    const ALL: [ChatCommand; 3] = [ChatCommand::Compact, ChatCommand::Clear, ChatCommand::Exit];

    /// The command as typed, e.g. `/compact`.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            ChatCommand::Compact => "/compact",
            ChatCommand::Clear => "/clear",
            ChatCommand::Exit => "/exit",
        }
    }
}

/// What one chat line (a one-shot text or a stdin line) asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Line {
    Command(ChatCommand),
    /// Text for the model (a leading `//` is sent as `/`).
    Message(String),
    /// Looks like a command (`/` and a word first, e.g. `/compat`) but is none: never sent or
    /// run. Holds the trimmed line.
    Unknown(String),
}

impl Line {
    /// Parses a line. A command is the exact, whole (trimmed) line; a line whose first word is
    /// `/` and ASCII letters, `-` or `_` is a mistyped command, so `/compat` cannot reach the model
    /// and `/clera` cannot clear anything; other text (`/usr/bin is…`) is a message.
    pub(super) fn parse(text: &str) -> Line {
        let trimmed = text.trim();
        if let Some(c) = ChatCommand::ALL.into_iter().find(|c| c.as_str() == trimmed) {
            return Line::Command(c);
        }
        if let Some(rest) = text.trim_start().strip_prefix("//") {
            return Line::Message(format!("/{rest}"));
        }
        let word = trimmed.split_whitespace().next().unwrap_or_default();
        match word.strip_prefix('/') {
            Some(name) if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphabetic() || c == '-' || c == '_') => {
                Line::Unknown(trimmed.to_string())
            }
            _ => Line::Message(text.to_string()),
        }
    }

    /// Names what the line asks for, for a refusal ("… was NOT executed").
    pub(super) fn what(&self) -> &str {
        match self {
            Line::Command(c) => c.as_str(),
            Line::Message(_) => "the message",
            Line::Unknown(w) => w,
        }
    }
}

/// The refusal of a mistyped command `line`: what it is not, the commands, and that nothing
/// happened.
pub(super) fn refusal(line: &str) -> String {
    let list = ChatCommand::ALL.map(ChatCommand::as_str).join(", ");
    format!(
        "`{line}` is not a command (a command is the whole line: {list}); it was NOT sent and NOT executed. To send a message that starts with `/`, begin it with `//`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_a_command_only_when_it_is_the_exact_whole_line() {
        let cmd = |c| Line::Command(c);
        let msg = |t: &str| Line::Message(t.to_string());
        let unknown = |t: &str| Line::Unknown(t.to_string());
        let cases = [
            ("/compact", cmd(ChatCommand::Compact)),
            ("  /clear \n", cmd(ChatCommand::Clear)),
            ("/exit", cmd(ChatCommand::Exit)),
            ("/compat", unknown("/compat")),
            ("/clera", unknown("/clera")),
            ("/CLEAR", unknown("/CLEAR")),
            ("/clear now", unknown("/clear now")),
            ("/usr/bin is where it lives", msg("/usr/bin is where it lives")),
            ("//clear", msg("/clear")),
            ("/", msg("/")),
            ("please /clear", msg("please /clear")),
        ];
        for (text, want) in cases {
            assert_eq!(Line::parse(text), want, "{text:?}");
        }
    }
}
