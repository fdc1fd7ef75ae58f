//! `ask_user` (docs/design.md §12, CMDC): puts a question to the user and waits for the answer.
//!
//! Owns the tool's schema, input checks and the wait: it opens the question in the agent's
//! [`Questions`], emits `ask_user {ref, question, options}` and returns the answer as the
//! result, or an error result when no user is attached (`error: no user attached`, a one-shot
//! chat **[chosen]**), the time runs out (CMDC: 300 s) or the turn is cancelled. How an answer
//! arrives (serve's route, the chat session's stdin) is the caller's business.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::{Tool, ToolContext, ToolOutput};
use crate::ask::Questions;
use cicy_protocol::event::{AskOption, EventKind};

/// The tool's name.
pub const NAME: &str = "ask_user";
/// CMDC: the question is given up after 300 000 ms (meta.yaml `ask_user_timeout_secs`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// **[chosen]** The result where nobody could answer (a one-shot chat).
pub const NO_USER_RESULT: &str = "error: no user attached";

/// The user a turn may ask: where questions go and how long an answer is waited for.
#[derive(Debug, Clone)]
pub struct User {
    pub questions: Arc<Questions>,
    pub timeout: Duration,
}

/// The `ask_user` tool.
#[derive(Debug, Default)]
pub struct AskUser;

fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "What to ask the user."},
            "options": {
                "type": "array",
                "description": "Choices to offer; leave out for a free-text answer.",
                "items": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "label": {"type": "string"}},
                    "required": ["id", "label"]
                }
            }
        },
        "required": ["question"]
    })
}

/// The question and its options from the model's input, or the error result saying what is wrong.
fn parse(input: &Value) -> Result<(&str, Vec<AskOption>), ToolOutput> {
    let question = match input.get("question").and_then(Value::as_str) {
        Some(q) if !q.trim().is_empty() => q,
        _ => return Err(ToolOutput::error("error: ask_user needs `question`: a non-empty string")),
    };
    let options = match input.get("options") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => serde_json::from_value::<Vec<AskOption>>(v.clone()).map_err(|e| {
            ToolOutput::error(format!("error: ask_user `options` must be a list of {{\"id\": string, \"label\": string}}: {e}"))
        })?,
    };
    Ok((question, options))
}

impl Tool for AskUser {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Ask the user a question and wait for the answer, which comes back as this tool's result. Offer `options` ({id, label}) for a choice, or none for free text. Ask only what you cannot find out yourself."
    }

    fn input_schema(&self) -> Value {
        input_schema()
    }

    fn run<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let (question, options) = match parse(input) {
                Ok(parsed) => parsed,
                Err(e) => return e,
            };
            let Some(user) = &ctx.user else {
                return ToolOutput::error(NO_USER_RESULT);
            };
            let mut pending = user.questions.ask(question, options);
            if let Some(events) = &ctx.events {
                let q = &pending.question;
                events.emit(EventKind::AskUser {
                    reference: q.reference.clone(),
                    question: q.question.clone(),
                    options: q.options.clone(),
                });
            }
            tokio::select! {
                answer = pending.answer() => match answer {
                    Some(answer) => ToolOutput::ok(answer),
                    None => ToolOutput::error("error: the question was withdrawn unanswered"),
                },
                () = tokio::time::sleep(user.timeout) => {
                    ToolOutput::error(format!("error: no answer from the user within {} s", user.timeout.as_secs()))
                }
                () = ctx.cancel.cancelled() => ToolOutput::error(super::CANCELLED_RESULT),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cicy_protocol::event::{Emitter, Event};
    use std::sync::Mutex;

    fn context(dir: &std::path::Path, timeout: Duration) -> (ToolContext, Arc<Questions>, Arc<Mutex<Vec<Event>>>) {
        let questions = Arc::new(Questions::default());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let mut ctx = ToolContext::for_tests(dir);
        ctx.events = Some(Emitter::new("w-1", move |ev| s.lock().unwrap().push(ev.clone())));
        ctx.user = Some(User { questions: questions.clone(), timeout });
        (ctx, questions, seen)
    }

    #[tokio::test]
    async fn no_user_and_bad_input_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bare = ToolContext::for_tests(dir.path());
        assert_eq!(AskUser.run(&json!({"question": "hi?"}), &bare).await, ToolOutput::error(NO_USER_RESULT));
        assert_eq!(
            AskUser.run(&json!({"question": ""}), &bare).await,
            ToolOutput::error("error: ask_user needs `question`: a non-empty string")
        );
        let out = AskUser.run(&json!({"question": "q", "options": [{"id": 1}]}), &bare).await;
        assert!(
            out.is_error && out.content.starts_with("error: ask_user `options` must be a list of {\"id\": string, \"label\": string}: "),
            "{out:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_question_times_out_and_is_withdrawn() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, questions, seen) = context(dir.path(), DEFAULT_TIMEOUT);
        let out = AskUser.run(&json!({"question": "still there?"}), &ctx).await;
        assert_eq!(out, ToolOutput::error("error: no answer from the user within 300 s"));
        let reference = match &seen.lock().unwrap()[0].kind {
            EventKind::AskUser { reference, question, options } => {
                assert_eq!((question.as_str(), options.len()), ("still there?", 0));
                reference.clone()
            }
            other => panic!("expected ask_user, got {other:?}"),
        };
        assert!(questions.respond(&reference, "late").is_err(), "a timed-out question takes no answer");
    }

    #[tokio::test]
    async fn an_answer_is_the_result_and_a_cancel_ends_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, questions, _seen) = context(dir.path(), DEFAULT_TIMEOUT);
        let input = json!({"question": "colour?", "options": [{"id": "b", "label": "blue"}]});
        let answering = async {
            let q = questions.next_open().await;
            assert_eq!(q.options, vec![AskOption { id: "b".into(), label: "blue".into() }]);
            questions.respond(&q.reference, "b").unwrap();
        };
        let (out, ()) = tokio::join!(AskUser.run(&input, &ctx), answering);
        assert_eq!(out, ToolOutput::ok("b"));
        let cancelling = async {
            questions.next_open().await;
            ctx.cancel.cancel();
        };
        let (out, ()) = tokio::join!(AskUser.run(&input, &ctx), cancelling);
        assert_eq!(out, ToolOutput::error("error: cancelled by user"));
    }
}
