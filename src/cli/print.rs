//! Prints turn events: answer text to stdout as it arrives, everything else to stderr, or every
//! event as one JSON object per line with `--json`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cicy::event::{Event, EventKind};

/// Prints events in human form.
#[derive(Debug, Default)]
pub(super) struct Human {
    /// Answer text was printed since the last `text_end`: stdout is in the middle of a line.
    text_open: AtomicBool,
    /// The reason of the retry line printed last, while only retries followed it: a run of
    /// identical retries (a gateway that is down, a rate limit) prints one line, not one each.
    last_retry: Mutex<Option<String>>,
}

impl Human {
    /// Prints one event: answer text to stdout, the rest to stderr.
    pub(super) fn print(&self, ev: &Event) {
        // A closed stdout or stderr (e.g. `| head`) must not abort the turn, so write errors
        // are ignored.
        let _ = self.write(ev, &mut std::io::stdout().lock(), &mut std::io::stderr().lock());
    }

    fn write(&self, ev: &Event, out: &mut impl Write, err: &mut impl Write) -> std::io::Result<()> {
        {
            let mut last = self.last_retry.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            match &ev.kind {
                EventKind::Retry { reason, .. } if last.as_deref() == Some(reason.as_str()) => return Ok(()),
                EventKind::Retry { reason, .. } => *last = Some(reason.clone()),
                _ => *last = None,
            }
        }
        match &ev.kind {
            EventKind::TextDelta { text } => {
                if !text.is_empty() {
                    self.text_open.store(true, Ordering::Relaxed);
                }
                write!(out, "{text}").and_then(|_| out.flush())
            }
            EventKind::TextEnd => {
                self.text_open.store(false, Ordering::Relaxed);
                writeln!(out).and_then(|_| out.flush())
            }
            // A turn cut short (cancelled, failed) mid-answer gets no `text_end`: end the line so
            // the next output does not start after the half-printed answer.
            EventKind::TurnEnded { .. } if self.text_open.swap(false, Ordering::Relaxed) => {
                writeln!(out).and_then(|_| out.flush())?;
                human_rest(&ev.kind, err)
            }
            other => human_rest(other, err),
        }
    }
}

/// Everything but answer text goes to stderr.
fn human_rest(kind: &EventKind, err: &mut impl Write) -> std::io::Result<()> {
    match kind {
        EventKind::TextDelta { .. } | EventKind::TextEnd => Ok(()),
        EventKind::ThinkingDelta { text } => write!(err, "{text}"),
        EventKind::ToolStarted { name, input, .. } => writeln!(err, "→ {name} {input}"),
        EventKind::ToolFinished { name, result, is_error, duration_ms, .. } => {
            let tag = if *is_error { "error" } else { "ok" };
            writeln!(err, "← {name} {tag} ({duration_ms} ms): {}", result.trim_end())
        }
        EventKind::Usage { input, output, cache_creation, cache_read, .. } => {
            writeln!(err, "· usage: input {input}, output {output}, cache write {cache_creation}, cache read {cache_read}")
        }
        EventKind::AuxUsage { aux, input, output, cache_creation, cache_read } => {
            writeln!(err, "· {aux} usage: input {input}, output {output}, cache write {cache_creation}, cache read {cache_read}")
        }
        EventKind::Retry { attempt, delay_ms, reason } => {
            writeln!(err, "· retry {attempt} in {delay_ms} ms: {reason}")
        }
        EventKind::Compacted { before, after } => writeln!(err, "· compacted: {before} → {after} messages"),
        EventKind::System { text } => writeln!(err, "· {text}"),
        EventKind::NoAnswerText => writeln!(err, "(no answer text)"),
        EventKind::Queued { text } | EventKind::Flush { text } => writeln!(err, "· {text}"),
        EventKind::Gap { from, to } => writeln!(err, "· events {from}–{to} were missed (no longer kept)"),
        EventKind::Steered { status } => writeln!(err, "· steer: {status}"),
        EventKind::State { .. } | EventKind::Done => Ok(()),
        EventKind::Wake { reason, n, .. } => writeln!(err, "· wake {n} ({reason})"),
        EventKind::MessageIn { from, subject, .. } => writeln!(err, "· message from {from}: {subject}"),
        EventKind::MessageOut { from, to, text, .. } => writeln!(err, "· {from} → {to}: {}", preview_line(text)),
        EventKind::TodoChange { action, line, .. } => writeln!(err, "· todo {action}: {line}"),
        EventKind::SubagentStart { id, description, subagent_type } => {
            writeln!(err, "· sub-agent {id} ({subagent_type}) started: {}", preview_line(description))
        }
        EventKind::SubagentEnd { id, outcome, result } => {
            writeln!(err, "· sub-agent {id} {}: {}", subagent_outcome_name(*outcome), preview_line(result))
        }
        EventKind::AskUser { reference, question, options } => {
            writeln!(err, "? {question}")?;
            for o in options {
                writeln!(err, "  {}: {}", o.id, o.label)?;
            }
            writeln!(err, "  (question {reference})")
        }
        EventKind::Hook { name, command, action, reason, duration_ms } => match reason {
            Some(reason) => writeln!(err, "· hook {name} {command}: {action}: {reason} ({duration_ms} ms)"),
            None => writeln!(err, "· hook {name} {command}: {action} ({duration_ms} ms)"),
        },
        EventKind::PlanChange { todos } => writeln!(err, "· plan: {}", cicy::tools::plan::summary(todos)),
        EventKind::Autonomy { job, status, detail } => match detail {
            Some(d) => writeln!(err, "· autonomy {job} {status}: {}", preview_line(d)),
            None => writeln!(err, "· autonomy {job} {status}"),
        },
        EventKind::Error { kind, message } => writeln!(err, "error ({kind}): {message}"),
        EventKind::TurnEnded { outcome } => match outcome {
            cicy::event::TurnOutcome::Completed => Ok(()),
            other => writeln!(err, "· turn ended: {}", outcome_name(*other)),
        },
        // The person at this terminal typed the prompt (or piped it in): no echo.
        EventKind::TurnStarted { .. } | EventKind::RoundStarted { .. } | EventKind::Prompt { .. } => Ok(()),
    }
}

/// The first line of a message, cut to 120 characters, for a one-line notice.
fn preview_line(text: &str) -> String {
    let first = text.lines().next().unwrap_or("");
    let cut: String = first.chars().take(120).collect();
    if cut.len() < text.trim_end().len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// The outcome as a bare word (`cancelled`), the same word `--json` prints.
fn outcome_name(o: cicy::event::TurnOutcome) -> &'static str {
    use cicy::event::TurnOutcome;
    match o {
        TurnOutcome::Completed => "completed",
        TurnOutcome::Cancelled => "cancelled",
        TurnOutcome::Blocked => "blocked",
        TurnOutcome::Failed => "failed",
    }
}

/// The sub-agent outcome as `--json` prints it (`timed_out`).
fn subagent_outcome_name(o: cicy::event::SubagentOutcome) -> &'static str {
    use cicy::event::SubagentOutcome;
    match o {
        SubagentOutcome::Completed => "completed",
        SubagentOutcome::Cancelled => "cancelled",
        SubagentOutcome::Blocked => "blocked",
        SubagentOutcome::Failed => "failed",
        SubagentOutcome::TimedOut => "timed_out",
    }
}

/// Prints one event as a JSON line on stdout.
pub(super) fn json(ev: &Event) {
    let mut out = std::io::stdout().lock();
    if let Ok(line) = serde_json::to_string(ev) {
        let _ = writeln!(out, "{line}").and_then(|_| out.flush());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cicy::event::TurnOutcome;

    fn ev(kind: EventKind) -> Event {
        Event { seq: 1, agent_id: "w-1".to_string(), kind }
    }

    fn run(kinds: Vec<EventKind>) -> (String, String) {
        let p = Human::default();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for k in kinds {
            p.write(&ev(k), &mut out, &mut err).unwrap();
        }
        (String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
    }

    #[test]
    fn a_turn_cut_short_mid_answer_ends_the_text_line() {
        let (out, err) =
            run(vec![EventKind::TextDelta { text: "half an ans".into() }, EventKind::TurnEnded { outcome: TurnOutcome::Cancelled }]);
        assert_eq!(out, "half an ans\n");
        assert_eq!(err, "· turn ended: cancelled\n");
        let (out, _) = run(vec![
            EventKind::TextDelta { text: "whole".into() },
            EventKind::TextEnd,
            EventKind::TurnEnded { outcome: TurnOutcome::Completed },
        ]);
        assert_eq!(out, "whole\n", "a finished line gets no second newline");
    }

    #[test]
    fn questions_and_sub_agents_print_on_stderr() {
        let (out, err) = run(vec![
            EventKind::SubagentStart {
                id: "s1".into(),
                description: "count the files\nin src".into(),
                subagent_type: "general-purpose".into(),
            },
            EventKind::SubagentEnd { id: "s1".into(), outcome: cicy::event::SubagentOutcome::TimedOut, result: "error: late".into() },
            EventKind::AskUser {
                reference: "r1".into(),
                question: "Which colour?".into(),
                options: vec![cicy::event::AskOption { id: "b".into(), label: "blue".into() }],
            },
        ]);
        assert_eq!(out, "");
        assert_eq!(
            err,
            "· sub-agent s1 (general-purpose) started: count the files…\n· sub-agent s1 timed_out: error: late\n? Which colour?\n  b: blue\n  (question r1)\n"
        );
    }

    #[test]
    fn an_answer_without_text_says_so_on_stderr() {
        let (out, err) = run(vec![EventKind::NoAnswerText, EventKind::TurnEnded { outcome: TurnOutcome::Completed }]);
        assert_eq!(out, "");
        assert_eq!(err, "(no answer text)\n");
    }

    #[test]
    fn a_rerun_after_shown_text_ends_its_line_and_says_retrying() {
        let (out, err) = run(vec![
            EventKind::TextDelta { text: "half an ans".into() },
            EventKind::TextEnd,
            EventKind::System { text: "[retrying] the answer above was cut off and is discarded; the round is sent again".into() },
            EventKind::Retry { attempt: 1, delay_ms: 500, reason: "cut".into() },
            EventKind::TextDelta { text: "whole".into() },
            EventKind::TextEnd,
        ]);
        assert_eq!(out, "half an ans\nwhole\n");
        assert_eq!(err, "· [retrying] the answer above was cut off and is discarded; the round is sent again\n· retry 1 in 500 ms: cut\n");
    }

    #[test]
    fn identical_retries_in_a_row_print_one_line() {
        let retry = |attempt, reason: &str| EventKind::Retry { attempt, delay_ms: 500, reason: reason.into() };
        let (_, err) = run(vec![
            retry(1, "refused; trying again for up to 10 s"),
            retry(2, "refused; trying again for up to 10 s"),
            retry(3, "HTTP 429"),
            EventKind::RoundStarted { round: 1 },
            retry(1, "HTTP 429"),
        ]);
        assert_eq!(
            err,
            "· retry 1 in 500 ms: refused; trying again for up to 10 s\n· retry 3 in 500 ms: HTTP 429\n· retry 1 in 500 ms: HTTP 429\n"
        );
    }
}
