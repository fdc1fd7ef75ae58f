//! What must fit the context window before a turn sends anything (issue 7 items 15–16).
//!
//! Owns three checks on the running turn: a warning when AGENTS.md, the user's message or a
//! round's tool results alone take more than half the window, refusing a message that cannot
//! fit even alone (before anything is sent, or right after the gateway refused a request as
//! over the window; the message stays in the history as the user wrote it), and learning the
//! window a gateway states when it refuses a request as too large. Sizes are the estimates of
//! `crate::compact::cut`, scaled by the gateway's own count of a refused request when it
//! states one ([`Counted`]). Must not touch: the history (it only reads it), the request.

use super::round::Turn;
use crate::compact::{self, cut, window};
use crate::conversation::message::Message;
use crate::conversation::outcome::Outcome;
use crate::event::{ErrorKind, EventKind};
use crate::gateway::overflow::Overflow;
use crate::gateway::{GatewayError, Prompt, ToolSpec};

/// Emits an [`EventKind::System`] warning for AGENTS.md and for the turn's user message when
/// either alone takes more than half of the context window.
pub(super) fn warn_large(t: &Turn<'_>, specs: &[ToolSpec]) {
    let w = compact::settings(t.session, t.m).context_window;
    let agents = cut::estimate_tokens(&t.m.agents_md);
    if agents > w / 2 {
        t.events.emit(EventKind::System {
            text: format!(
                "AGENTS.md takes ~{agents} tokens, more than half of the model's context window ({w} tokens); every request carries it"
            ),
        });
    }
    if let Some(msg) = turn_message(t) {
        let tokens = cut::message_tokens(msg);
        if tokens > w / 2 && needed_alone(t, specs, msg) <= w {
            t.events.emit(EventKind::System {
                text: format!("this message takes ~{tokens} tokens, more than half of the model's context window ({w} tokens)"),
            });
        }
    }
}

/// Emits an [`EventKind::System`] warning when the tool results just appended (the last
/// message) take more than half of the context window: the next round must compact.
pub(super) fn warn_large_results(t: &Turn<'_>) {
    let w = compact::settings(t.session, t.m).context_window;
    let Some(msg) = t.session.conversation().current.messages.last() else { return };
    let tokens = cut::message_tokens(msg);
    if tokens > w / 2 {
        t.events.emit(EventKind::System {
            text: format!(
                "the tool results of this round take ~{tokens} tokens, more than half of the model's context window ({w} tokens)"
            ),
        });
    }
}

/// When [`refuse_too_large`] runs: before anything of the turn was sent, or after the gateway
/// refused a request as over the context window.
#[derive(Debug, Clone, Copy)]
pub(super) enum Check {
    BeforeSending,
    /// With the gateway's count of the refused request, when it stated one.
    AfterRefusal(Option<Counted>),
}

/// The gateway's count of a refused request beside cicy's estimate of the same request (both in
/// tokens): how far the estimate fell short for this turn's text (hex, base64 or code run to
/// 1–2 bytes a token where the estimate assumes 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counted {
    /// `n_prompt_tokens`, `resulted in …`, `prompt is too long: …` (see `gateway::overflow`).
    pub stated: u64,
    /// `compact::prompt_tokens` of the request as sent.
    pub estimated: u64,
}

impl Counted {
    /// The count `over` states for `prompt`, the request it refused; `None` when it states none.
    pub(super) fn of(over: &Overflow, prompt: &Prompt) -> Option<Self> {
        let estimated = compact::prompt_tokens(prompt).max(1);
        over.prompt_tokens.map(|stated| Counted { stated, estimated })
    }

    /// `tokens` scaled by stated / estimated when the estimate fell short; unchanged when the
    /// estimate was already as large (it never lowers an estimate).
    fn scale(&self, tokens: u64) -> u64 {
        if self.stated <= self.estimated {
            return tokens;
        }
        let scaled = u128::from(tokens) * u128::from(self.stated) / u128::from(self.estimated);
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }
}

/// `Some(Blocked)`, after an `error` event of kind `too_large`, when the turn's user message
/// cannot fit the context window even alone: with the system text, tools, AGENTS.md and the
/// answer's `max_tokens`. After a refusal whose count is known, the message's estimate is
/// scaled by the gateway's count over cicy's estimate of the refused request
/// ([`Counted::scale`]) and the rest is taken as estimated. When no message could fit, the error
/// names AGENTS.md if it is the larger part, else the answer's reserve and the window setting. Nothing (more) is sent and the message stays in the history.
pub(super) fn refuse_too_large(t: &Turn<'_>, specs: &[ToolSpec], check: Check) -> Option<Outcome> {
    let w = compact::settings(t.session, t.m).context_window;
    let msg = turn_message(t)?;
    let estimated = cut::message_tokens(msg);
    let fixed = needed_alone(t, specs, msg) - estimated;
    let counted = match check {
        Check::BeforeSending => None,
        Check::AfterRefusal(counted) => counted,
    };
    let tokens = counted.map_or(estimated, |c| c.scale(estimated));
    if fixed + tokens <= w {
        return None;
    }
    let model = &t.m.model;
    let nothing = match check {
        Check::BeforeSending => "Nothing was sent",
        Check::AfterRefusal(_) => "Nothing more is sent",
    };
    let agents_md = cut::estimate_tokens(&t.m.agents_md);
    let message = if fixed > w && u64::from(t.m.max_tokens) >= agents_md {
        format!(
            "requests need ~{fixed} tokens before any message ({} tokens reserved for the answer, AGENTS.md ~{agents_md}, the system prompt and tools), over the context window of model {model} ({w} tokens). {nothing}; the message is kept in the history. Check the context window (CICY_CONTEXT_WINDOW, compaction.context_window or the role's context_window) or lower max_tokens in the role's meta.yaml",
            t.m.max_tokens
        )
    } else if fixed > w {
        format!(
            "AGENTS.md takes ~{} tokens: with the system prompt and {} tokens for the answer, requests need ~{fixed} tokens before any message, over the context window of model {model} ({w} tokens). {nothing}; the message is kept in the history. Shorten AGENTS.md in the workspace",
            agents_md,
            t.m.max_tokens
        )
    } else {
        let counted_note = counted.filter(|c| c.stated > c.estimated).map_or(String::new(), |c| {
            format!(
                " as the gateway counts (the gateway counted {} tokens for the refused request, estimated at ~{})",
                c.stated, c.estimated
            )
        });
        format!(
            "the message is too large to send: {} bytes, ~{tokens} tokens{counted_note}; the context window of model {model} is {w} tokens, and with the system prompt, AGENTS.md and {} tokens for the answer at most ~{} tokens of message fit. {nothing}; the message is kept in the history. Send it in smaller parts, or save it as a file in the workspace and ask about the file",
            msg.plain_text().len(),
            t.m.max_tokens,
            w - fixed
        )
    };
    t.events.emit(EventKind::Error { kind: ErrorKind::TooLarge, message });
    Some(Outcome::Blocked)
}

/// Records the window that `over` states (or half the assumed one) for this agent's model, and
/// says so in an [`EventKind::System`]. A file that cannot be written is said too; the turn
/// goes on with the compaction the refusal calls for either way.
pub(super) fn learn_window(t: &Turn<'_>, over: &Overflow, err: &GatewayError) {
    let assumed = compact::settings(t.session, t.m).context_window;
    let (tokens, reason) = window::after_overflow(assumed, over);
    let ws = &t.session.agent().record.workspace;
    let saved = match window::record(ws, &t.m.model, tokens, &reason) {
        Ok(()) => format!("recorded in .cicy/{}", window::FILE_NAME),
        Err(e) => format!("could not be recorded: {e}"),
    };
    t.events.emit(EventKind::System {
        text: format!(
            "the gateway refused the request as over the context window ({err}); {reason}: model {} now has a window of {tokens} tokens ({saved}); compacting and sending once more",
            t.m.model
        ),
    });
}

/// The user message that started the running turn.
fn turn_message<'a>(t: &'a Turn<'_>) -> Option<&'a Message> {
    let msgs = &t.session.conversation().current.messages;
    cut::last_user_text(msgs).map(|i| &msgs[i])
}

/// Estimated tokens of a request carrying only `msg`, plus the answer's `max_tokens`.
fn needed_alone(t: &Turn<'_>, specs: &[ToolSpec], msg: &Message) -> u64 {
    compact::window_tokens(&t.m.template.system_md, specs, std::slice::from_ref(msg))
        + cut::estimate_tokens(&t.m.agents_md)
        + u64::from(t.m.max_tokens)
}

#[cfg(test)]
mod tests {
    use super::Counted;

    #[test]
    fn the_gateways_count_scales_an_estimate_up_never_down() {
        // The new user's 21 KB of hex words on llama.cpp: 23085 tokens counted, ~5617 estimated.
        let c = Counted { stated: 23_085, estimated: 5617 };
        assert_eq!(c.scale(5256), 21_601);
        assert_eq!(Counted { stated: 9000, estimated: 15_000 }.scale(4229), 4229);
        assert_eq!(Counted { stated: u64::MAX, estimated: 1 }.scale(u64::MAX), u64::MAX);
    }
}
