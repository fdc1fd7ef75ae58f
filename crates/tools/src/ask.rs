//! Questions an agent's turn puts to its user and the answers that come back (docs/design.md §12
//! `ask_user`, CMDC `ask_user` / `user_respond`).
//!
//! Owns the open questions of one agent: [`Questions::ask`] opens one under a fresh `ref` and
//! hands back the [`Pending`] answer the `ask_user` tool waits on; [`Questions::respond`] is
//! how an answer arrives (serve's `POST /api/agents/<id>/respond`, the chat session's next
//! stdin line); [`Questions::next_open`] tells a chat session that a question waits. A
//! question is withdrawn when its `Pending` is dropped (answered, timed out, cancelled), so a
//! late answer finds no question. Whoever runs turns decides whether a user is attached at all
//! (`Session::questions`); this module knows nothing of HTTP, terminals or the turn loop.

use std::sync::Arc;

use tokio::sync::{oneshot, watch};

use cicy_protocol::event::AskOption;

/// One open question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The id an answer names (a UUIDv4; CMDC uses an Erlang ref).
    pub reference: String,
    pub question: String,
    pub options: Vec<AskOption>,
}

/// An answer named a question that is not open (never asked, already answered, timed out).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no open question with ref `{0}`")]
pub struct UnknownRef(pub String);

/// The open questions of one agent, shared by its turns and whoever answers them.
#[derive(Debug)]
pub struct Questions {
    /// Each open question with where its answer goes (taken by the first answer).
    open: watch::Sender<Vec<(Question, Option<oneshot::Sender<String>>)>>,
}

impl Default for Questions {
    fn default() -> Self {
        Self { open: watch::Sender::new(Vec::new()) }
    }
}

/// The answer to one question, to await; dropping it withdraws the question.
#[derive(Debug)]
pub struct Pending {
    pub question: Question,
    answer: oneshot::Receiver<String>,
    questions: Arc<Questions>,
}

impl Pending {
    /// The answer, or `None` when the question was withdrawn unanswered.
    pub async fn answer(&mut self) -> Option<String> {
        (&mut self.answer).await.ok()
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let reference = &self.question.reference;
        self.questions.open.send_if_modified(|open| {
            let before = open.len();
            open.retain(|(q, _)| &q.reference != reference);
            open.len() != before
        });
    }
}

impl Questions {
    /// Opens `question` under a new ref.
    pub fn ask(self: &Arc<Self>, question: &str, options: Vec<AskOption>) -> Pending {
        let (tx, rx) = oneshot::channel();
        let q = Question { reference: uuid::Uuid::new_v4().to_string(), question: question.to_string(), options };
        self.open.send_modify(|open| open.push((q.clone(), Some(tx))));
        Pending { question: q, answer: rx, questions: self.clone() }
    }

    /// Answers the open question `reference` with `response`.
    ///
    /// Errors: [`UnknownRef`] when no such question is open.
    pub fn respond(&self, reference: &str, response: &str) -> Result<(), UnknownRef> {
        let mut sender = None;
        // Taking the sender changes nothing a watcher looks at (the question stays open until
        // its `Pending` is dropped), so no one is woken.
        self.open.send_if_modified(|open| {
            sender = open.iter_mut().find(|(q, _)| q.reference == reference).and_then(|(_, tx)| tx.take());
            false
        });
        match sender.map(|tx| tx.send(response.to_string())) {
            Some(Ok(())) => Ok(()),
            _ => Err(UnknownRef(reference.to_string())),
        }
    }

    /// The oldest open question not yet answered, once there is one.
    pub async fn next_open(&self) -> Question {
        let mut rx = self.open.subscribe();
        loop {
            if let Some((q, _)) = rx.borrow_and_update().iter().find(|(_, tx)| tx.is_some()) {
                return q.clone();
            }
            if rx.changed().await.is_err() {
                // Unreachable while `self` lives (it holds the sender); wait forever rather than spin.
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_reaches_its_question_once_and_a_withdrawn_one_takes_none() {
        let qs = Arc::new(Questions::default());
        let mut p = qs.ask("colour?", vec![AskOption { id: "b".into(), label: "blue".into() }]);
        assert_eq!(qs.next_open().await, p.question);
        assert_eq!(qs.respond("nope", "x"), Err(UnknownRef("nope".into())));
        assert_eq!(qs.respond(&p.question.reference, "blue"), Ok(()));
        let later = qs.ask("later?", Vec::new());
        assert_eq!(qs.next_open().await, later.question, "an answered question is not offered again");
        assert_eq!(qs.respond(&p.question.reference, "again"), Err(UnknownRef(p.question.reference.clone())));
        assert_eq!(p.answer().await.as_deref(), Some("blue"));
        let reference = p.question.reference.clone();
        drop(p);
        assert_eq!(qs.respond(&reference, "late"), Err(UnknownRef(reference.clone())));
        drop(later);
        assert!(qs.open.borrow().is_empty());
    }
}
