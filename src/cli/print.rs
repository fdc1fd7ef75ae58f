//! Prints turn events: answer text to stdout as it arrives, everything else to stderr, or every
//! event as one JSON object per line with `--json`.

use std::io::Write;

use cicy::event::{Event, EventKind};

/// Prints one event in human form.
pub fn human(ev: &Event) {
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    // A closed stdout or stderr (e.g. `| head`) must not abort the turn, so write errors are ignored.
    let _ = match &ev.kind {
        EventKind::TextDelta { text } => write!(out, "{text}").and_then(|_| out.flush()),
        EventKind::TextEnd => writeln!(out).and_then(|_| out.flush()),
        EventKind::ThinkingDelta { text } => write!(err, "{text}"),
        EventKind::ToolStarted { name, input, .. } => writeln!(err, "→ {name} {input}"),
        EventKind::ToolFinished { name, result, is_error, duration_ms, .. } => {
            let tag = if *is_error { "error" } else { "ok" };
            writeln!(err, "← {name} {tag} ({duration_ms} ms): {}", result.trim_end())
        }
        EventKind::Usage { input, output, cache_creation, cache_read, .. } => writeln!(
            err,
            "· usage: input {input}, output {output}, cache write {cache_creation}, cache read {cache_read}"
        ),
        EventKind::AuxUsage { aux, input, output, cache_creation, cache_read } => writeln!(
            err,
            "· {aux} usage: input {input}, output {output}, cache write {cache_creation}, cache read {cache_read}"
        ),
        EventKind::Retry { attempt, delay_ms, reason } => {
            writeln!(err, "· retry {attempt} in {delay_ms} ms: {reason}")
        }
        EventKind::Compacted { before, after } => writeln!(err, "· compacted: {before} → {after} messages"),
        EventKind::System { text } => writeln!(err, "· {text}"),
        EventKind::Queued => writeln!(err, "· queued"),
        EventKind::Error { kind, message } => writeln!(err, "error ({kind}): {message}"),
        EventKind::TurnEnded { outcome } => match outcome {
            cicy::event::TurnOutcome::Completed => Ok(()),
            other => writeln!(err, "· turn ended: {}", serde_json::to_string(other).unwrap_or_default()),
        },
        EventKind::TurnStarted { .. } | EventKind::RoundStarted { .. } => Ok(()),
    };
}

/// Prints one event as a JSON line on stdout.
pub fn json(ev: &Event) {
    let mut out = std::io::stdout().lock();
    if let Ok(line) = serde_json::to_string(ev) {
        let _ = writeln!(out, "{line}").and_then(|_| out.flush());
    }
}
