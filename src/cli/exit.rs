//! The exit codes of `chat`, `retry`, `compact` and `clear` (README "Exit codes"): a line's
//! code from its outcome, and a session's code as the worst over its lines.
//!
//! Must not touch: the terminal, the history or the gateway; the signal codes of a process that
//! leaves on SIGTERM or SIGHUP (143, 129) are `chat`'s.

use cicy::event::TurnOutcome;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
