//! What a chat text asks for: a conversation command, a message for the model, or (typed by a
//! person) a mistyped command that must be neither sent nor run. The one parser of the command
//! line (`Line::parse`) and of serve's chat route (`Posted::parse`); running what it asks for is
//! the caller's.
//!
//! The two readings differ on purpose, and each keeps what its users already rely on: a person
//! at a terminal gets `/exit`, surrounding blanks trimmed, and a refusal for `/compat`; a text
//! posted to serve (often by a program, or relayed from an inbox with its mailbox tag) is a
//! command only when it is exactly `/clear` or `/compact`, and any other text reaches the model.

/// A conversation command that the library runs (`super::compact`, `super::clear`), from the
/// command line or serve alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Compact,
    Clear,
}

impl Command {
    const ALL: [Command; 2] = [Command::Compact, Command::Clear];

    /// The command as typed, e.g. `/compact`.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Compact => "/compact",
            Command::Clear => "/clear",
        }
    }

    /// The command that `text` is exactly, with no blank around it.
    fn exactly(text: &str) -> Option<Command> {
        Command::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

/// What a chat session leaves with: typed as a whole line, it is no conversation command.
const EXIT: &str = "/exit";

/// What one chat line typed on the command line (a one-shot text or a stdin line) asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Command(Command),
    /// `/exit`: leave the chat session.
    Exit,
    /// Text for the model (a leading `//` is sent as `/`).
    Message(String),
}

/// A line that looks like a command (`/` and a word first, e.g. `/compat`) but is none; its
/// text is the refusal a user sees, naming the trimmed line and the commands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{line}` is not a command (a command is the whole line: /compact, /clear, /exit); it was NOT sent and NOT executed. To send a message that starts with `/`, begin it with `//`")]
pub struct NotACommand {
    /// The trimmed line as typed.
    pub line: String,
}

impl Line {
    /// Parses a line. A command is the exact, whole (trimmed) line; a line whose first word is
    /// `/` and ASCII letters, `-` or `_` is a mistyped command, so `/compat` cannot reach the model
    /// and `/clera` cannot clear anything; other text (`/usr/bin is…`) is a message.
    /// Errors: [`NotACommand`] for such a mistyped command.
    pub fn parse(text: &str) -> Result<Line, NotACommand> {
        let trimmed = text.trim();
        if let Some(c) = Command::exactly(trimmed) {
            return Ok(Line::Command(c));
        }
        if trimmed == EXIT {
            return Ok(Line::Exit);
        }
        if let Some(rest) = text.trim_start().strip_prefix("//") {
            return Ok(Line::Message(format!("/{rest}")));
        }
        let word = trimmed.split_whitespace().next().unwrap_or_default();
        match word.strip_prefix('/') {
            Some(name) if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphabetic() || c == '-' || c == '_') => {
                Err(NotACommand { line: trimmed.to_string() })
            }
            _ => Ok(Line::Message(text.to_string())),
        }
    }

    /// Names what the line asks for, for a refusal ("… was NOT executed").
    pub fn what(&self) -> &str {
        match self {
            Line::Command(c) => c.as_str(),
            Line::Exit => EXIT,
            Line::Message(_) => "the message",
        }
    }
}

/// What a text posted to serve's chat route asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Posted {
    Command(Command),
    Message(String),
}

impl Posted {
    /// A command when the text, after a leading cicy mailbox tag (`📮 … "] "`), is exactly
    /// `/clear` or `/compact` *(cicy)*; `//clear` and `//compact` are those words as messages
    /// (what the command line sends for a message `/clear`); any other text is a message as
    /// posted.
    pub fn parse(text: String) -> Posted {
        let body = match text.strip_prefix('📮') {
            Some(rest) => rest.split_once("\"] ").map_or(text.as_str(), |(_, after)| after),
            None => &text,
        };
        if let Some(c) = Command::exactly(body) {
            return Posted::Command(c);
        }
        match text.strip_prefix('/') {
            Some(escaped) if Command::exactly(escaped).is_some() => Posted::Message(escaped.to_string()),
            _ => Posted::Message(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_a_command_only_when_it_is_the_exact_whole_line() {
        let cmd = |c| Ok(Line::Command(c));
        let msg = |t: &str| Ok(Line::Message(t.to_string()));
        let not = |t: &str| Err(NotACommand { line: t.to_string() });
        let cases = [
            ("/compact", cmd(Command::Compact)),
            ("  /clear \n", cmd(Command::Clear)),
            ("/exit", Ok(Line::Exit)),
            (" /exit\n", Ok(Line::Exit)),
            ("/compat", not("/compat")),
            ("/clera", not("/clera")),
            ("/CLEAR", not("/CLEAR")),
            ("  /clear now ", not("/clear now")),
            ("/usr/bin is where it lives", msg("/usr/bin is where it lives")),
            ("//clear", msg("/clear")),
            ("//exit", msg("/exit")),
            ("/", msg("/")),
            ("please /clear", msg("please /clear")),
        ];
        for (text, want) in cases {
            assert_eq!(Line::parse(text), want, "{text:?}");
        }
    }

    #[test]
    fn a_mistyped_command_is_refused_naming_it() {
        let e = Line::parse(" /compat\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "`/compat` is not a command (a command is the whole line: /compact, /clear, /exit); it was NOT sent and NOT executed. To send a message that starts with `/`, begin it with `//`"
        );
    }

    #[test]
    fn a_posted_command_is_exact_and_the_mailbox_tag_is_ignored() {
        let cmd = Posted::Command;
        let msg = |t: &str| Posted::Message(t.to_string());
        let cases = [
            ("/clear", cmd(Command::Clear)),
            ("/compact", cmd(Command::Compact)),
            ("📮 [from \"w-2\"] /clear", cmd(Command::Clear)),
            ("📮 [from \"w-2\"] /compact", cmd(Command::Compact)),
            ("/clear now", msg("/clear now")),
            (" /compact", msg(" /compact")),
            ("📮 no tag /clear", msg("📮 no tag /clear")),
            ("/exit", msg("/exit")),
            ("/compat", msg("/compat")),
            ("//clear", msg("/clear")),
            ("//compact", msg("/compact")),
            ("//exit", msg("//exit")),
            ("📮 [from \"w-2\"] //clear", msg("📮 [from \"w-2\"] //clear")),
        ];
        for (text, want) in cases {
            assert_eq!(Posted::parse(text.to_string()), want, "{text:?}");
        }
    }
}
