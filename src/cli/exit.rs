//! The exit codes of `chat`, `retry`, `compact` and `clear` (docs/serve.md "Output, Ctrl-C and
//! exit codes"): a line's code from its outcome (or, through a serve, from the events it
//! streamed), and a session's code as the worst over its lines.
//!
//! Must not touch: the terminal, the history or the gateway; the signal codes of a process that
//! leaves on SIGTERM or SIGHUP (143, 129) are `chat`'s and `remote`'s.

use cicy::event::{EventKind, TurnOutcome};

/// Exit code 130: a turn or `/compact` cancelled by Ctrl-C (128 + SIGINT, the shell's rule).
pub(super) const CANCELLED: u8 = 130;

/// A turn's exit code: 0 completed, 130 cancelled, 1 failed or blocked.
pub(super) fn exit_code(o: TurnOutcome) -> u8 {
    match o {
        TurnOutcome::Completed => 0,
        TurnOutcome::Cancelled => CANCELLED,
        TurnOutcome::Blocked | TurnOutcome::Failed => 1,
    }
}

/// The exit code of a session: the worst over its lines, where a failure or refusal (1) is
/// worse than a Ctrl-C cancel (130), which is worse than success (0). So a script that pipes
/// lines learns that one went wrong whatever came after it.
#[derive(Debug, Default)]
pub(super) struct Worst(pub(super) u8);

impl Worst {
    /// Counts one line's exit code.
    pub(super) fn add(&mut self, code: u8) {
        let rank = |c: u8| match c {
            0 => 0,
            CANCELLED => 1,
            _ => 2,
        };
        if rank(code) > rank(self.0) {
            self.0 = code;
        }
    }
}

/// The exit code of one line from the events it streamed: the worst turn outcome (0, 130, 1)
/// when a turn ended, else 1 after an error event (a refusal, a failed `/compact`), else 0 (a
/// command that ran, or an input the serve queued for after the current reply).
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// For `/compact` and `/clear`: a turn that `/clear` cancelled is not this line's outcome.
    ignore_turns: bool,
    turns: Option<Worst>,
    error: bool,
}

impl Tally {
    /// The tally of `/compact` or `/clear`, which ignores turn outcomes.
    pub(super) fn command() -> Self {
        Self { ignore_turns: true, ..Self::default() }
    }

    /// Counts one streamed event.
    pub(super) fn add(&mut self, kind: &EventKind) {
        match kind {
            EventKind::TurnEnded { outcome } if !self.ignore_turns => {
                self.turns.get_or_insert_with(Worst::default).add(exit_code(*outcome));
            }
            EventKind::Error { .. } => self.error = true,
            _ => {}
        }
    }

    /// The line's exit code.
    pub(super) fn code(&self) -> u8 {
        match &self.turns {
            Some(w) => w.0,
            None => u8::from(self.error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cicy::event::ErrorKind;

    #[test]
    fn the_worst_code_wins_whatever_the_order() {
        for codes in [[1, 0, 130], [0, 130, 1], [130, 1, 0]] {
            let mut w = Worst::default();
            codes.iter().for_each(|&c| w.add(c));
            assert_eq!(w.0, 1, "{codes:?}");
        }
        let mut w = Worst::default();
        [0, 130, 0].iter().for_each(|&c| w.add(c));
        assert_eq!(w.0, 130);
        assert_eq!(Worst::default().0, 0);
    }

    fn code(ignore_turns: bool, kinds: &[EventKind]) -> u8 {
        let mut t = Tally { ignore_turns, ..Tally::default() };
        kinds.iter().for_each(|k| t.add(k));
        t.code()
    }

    #[test]
    fn a_stream_exits_like_the_in_process_line() {
        let ended = |outcome| EventKind::TurnEnded { outcome };
        let error = EventKind::Error { kind: ErrorKind::Busy, message: "x".into() };
        assert_eq!(code(false, &[ended(TurnOutcome::Completed), EventKind::Done]), 0);
        assert_eq!(code(false, &[ended(TurnOutcome::Cancelled), EventKind::Done]), 130);
        assert_eq!(code(false, &[error.clone(), ended(TurnOutcome::Failed)]), 1);
        assert_eq!(code(false, &[ended(TurnOutcome::Blocked)]), 1);
        // The first turn and the follow-up of queued input: the worst counts.
        assert_eq!(code(false, &[ended(TurnOutcome::Completed), ended(TurnOutcome::Cancelled)]), 130);
        // An input queued behind the current reply was accepted.
        assert_eq!(code(false, &[EventKind::Queued { text: "q".into() }, EventKind::Done]), 0);
        // A refused `/compact` sent as a chat line: an error and no turn.
        assert_eq!(code(false, &[error.clone(), EventKind::Done]), 1);
        // `/clear` cancelled a turn: that turn's outcome is not the command's.
        assert_eq!(code(true, &[ended(TurnOutcome::Cancelled), EventKind::System { text: "/clear".into() }]), 0);
        assert_eq!(code(true, &[error]), 1);
    }
}
