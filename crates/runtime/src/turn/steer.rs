//! Steering a running turn (docs/design.md §9 "Steer", from CMDC).
//!
//! Owns the queue of steering texts a caller adds while a turn runs ([`Steering`], capped at
//! [`Steering::CAP`]), delivering them into the next round's user message after the tool results
//! ([`deliver`]), and interrupting the running batch of tool calls: the call that runs is
//! cancelled (its process group killed as a cancel kills it, see `crate::tools::process`) and the
//! calls not yet started are not run. The turn loop asks this module per call whether it may start
//! ([`Steering::start_call`]) and whether it was interrupted ([`Steering::end_call`]).
//! Must not touch: HTTP or the server's states; the tool results' wording beyond
//! [`INTERRUPTED_RESULT`]; the user's cancel (the turn's own token).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio_util::sync::CancellationToken;

use super::round::Turn;
use super::tools::extend_last;
use crate::agent::AgentError;
use crate::conversation::message::ContentBlock;
use crate::event::{EventKind, SteerStatus};

/// The result text of a tool call that a steer with `interrupt` stopped or kept from starting
/// (docs/design.md §9).
pub const INTERRUPTED_RESULT: &str = "error: interrupted by steer";

/// A steer was refused: [`Steering::CAP`] texts already wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the steering queue is full: {} texts already wait for the next round", Steering::CAP)]
pub struct SteerFull;

/// Texts to add to a running turn, and the switch that interrupts its running tool calls.
/// Clones share one state (an `Arc` inside): the server's actor keeps one, the running turn
/// another.
#[derive(Debug, Clone, Default)]
pub struct Steering {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    queue: Vec<String>,
    /// `Some` while a batch of tool calls runs.
    batch: Option<Batch>,
    /// The turn is asked to end at its next round boundary ([`Steering::request_yield`]).
    yield_turn: bool,
}

#[derive(Debug, Default)]
struct Batch {
    interrupted: bool,
    /// The token of the call that runs now (a child of the turn's cancel token).
    running: Option<CancellationToken>,
}

impl Steering {
    /// Texts that may wait at once; the next is refused (CMDC: 3).
    pub const CAP: usize = 3;

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The state stays consistent at every unlock, so a panic elsewhere leaves it usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `text` for the next round's user message; returns how many texts wait now. A
    /// blank text is not queued (the APIs refuse empty text blocks) and the count is returned
    /// unchanged. Errors: [`SteerFull`] when [`Self::CAP`] texts already wait.
    pub fn push(&self, text: String) -> Result<usize, SteerFull> {
        let mut inner = self.lock();
        if text.trim().is_empty() {
            return Ok(inner.queue.len());
        }
        if inner.queue.len() >= Self::CAP {
            return Err(SteerFull);
        }
        inner.queue.push(text);
        Ok(inner.queue.len())
    }

    /// While a batch of tool calls runs: cancels the running call (a command's process group
    /// gets SIGTERM at once, SIGKILL after the same grace as a cancel), and the calls of the
    /// batch not yet started do not run; each gets [`INTERRUPTED_RESULT`]. The turn goes on with
    /// its next round. Does nothing when no batch runs (the model is answering, or no turn runs).
    pub fn interrupt(&self) {
        let mut inner = self.lock();
        if let Some(batch) = inner.batch.as_mut() {
            batch.interrupted = true;
            if let Some(token) = &batch.running {
                token.cancel();
            }
        }
    }

    /// Removes and returns the waiting texts, oldest first: what a turn that ended without tool
    /// calls left for the caller (to start the next turn with).
    pub fn take_all(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().queue)
    }

    /// Asks the running turn to end before its next round starts, as a cancel at that point
    /// would (outcome `cancelled`): what the round did stays, nothing is cut mid-answer or
    /// mid-tool. Idle autonomy's preemption of a model-turn intent (docs/design.md §13 **[chosen]**).
    pub fn request_yield(&self) {
        self.lock().yield_turn = true;
    }

    /// Whether [`Self::request_yield`] was called since the last [`Self::clear_yield`].
    pub fn yield_requested(&self) -> bool {
        self.lock().yield_turn
    }

    /// Forgets a yield request (a new job starts).
    pub fn clear_yield(&self) {
        self.lock().yield_turn = false;
    }

    /// Drops the waiting texts (an abort).
    pub fn clear(&self) {
        self.lock().queue.clear();
    }

    /// How many texts wait.
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no text waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Marks a batch of tool calls as running until the guard drops (also when the turn's
    /// future is dropped mid-batch).
    pub(super) fn begin_batch(&self) -> BatchGuard<'_> {
        self.lock().batch = Some(Batch::default());
        BatchGuard(self)
    }

    /// The token the next call of the batch runs with (a child of `cancel`), or `None` when
    /// the batch was interrupted and the call must not start.
    pub(super) fn start_call(&self, cancel: &CancellationToken) -> Option<CancellationToken> {
        let mut inner = self.lock();
        let Some(batch) = inner.batch.as_mut() else {
            return Some(cancel.child_token());
        };
        if batch.interrupted {
            return None;
        }
        let token = cancel.child_token();
        batch.running = Some(token.clone());
        Some(token)
    }

    /// Ends the call [`Self::start_call`] began; whether an interrupt came while it ran.
    pub(super) fn end_call(&self) -> bool {
        let mut inner = self.lock();
        inner.batch.as_mut().is_some_and(|b| {
            b.running = None;
            b.interrupted
        })
    }
}

/// Ends the batch [`Steering::begin_batch`] began when dropped.
pub(super) struct BatchGuard<'a>(&'a Steering);

impl Drop for BatchGuard<'_> {
    fn drop(&mut self) {
        self.0.lock().batch = None;
    }
}

/// After a round's tool calls all have results: appends the waiting texts as text blocks after
/// them, in the same user message (history and reply.json), and emits one
/// `steered {status: "delivered"}`. Nothing happens when no text waits.
pub(super) async fn deliver(t: &mut Turn<'_>) -> Result<(), AgentError> {
    let mut texts = Vec::new();
    // The `before_steering` hooks may change a text or refuse it (docs/design.md §12).
    for text in t.steering.take_all() {
        match t.hooks.before_steering(text).await {
            Ok(text) => texts.push(text),
            Err(_) => t.events.emit(EventKind::Steered { status: SteerStatus::Refused }),
        }
    }
    if texts.is_empty() {
        return Ok(());
    }
    extend_last(t, texts.into_iter().map(ContentBlock::text).collect())?;
    t.events.emit(EventKind::Steered { status: SteerStatus::Delivered });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fourth_text_is_refused_and_the_queue_keeps_its_order() {
        let s = Steering::default();
        let shared = s.clone();
        assert_eq!(s.push("a".into()), Ok(1));
        assert_eq!(shared.push("b".into()), Ok(2));
        assert_eq!(s.push("  \n".into()), Ok(2));
        assert_eq!(s.push("c".into()), Ok(3));
        assert_eq!(s.push("d".into()), Err(SteerFull));
        assert_eq!(SteerFull.to_string(), "the steering queue is full: 3 texts already wait for the next round");
        assert_eq!(shared.len(), 3);
        assert_eq!(shared.take_all(), ["a", "b", "c"]);
        assert!(s.is_empty());
        assert_eq!(s.push("e".into()), Ok(1));
        s.clear();
        assert_eq!((s.len(), s.take_all()), (0, Vec::<String>::new()));
    }

    #[test]
    fn an_interrupt_stops_the_running_call_and_the_rest_of_its_batch_only() {
        let s = Steering::default();
        let cancel = CancellationToken::new();
        s.interrupt();
        let batch = s.begin_batch();
        let first = s.start_call(&cancel).expect("an interrupt outside a batch does nothing");
        assert!(!s.end_call());
        let second = s.start_call(&cancel).expect("not interrupted");
        s.interrupt();
        assert!(second.is_cancelled() && !first.is_cancelled() && !cancel.is_cancelled());
        assert!(s.end_call());
        assert!(s.start_call(&cancel).is_none());
        drop(batch);
        let _batch = s.begin_batch();
        let next = s.start_call(&cancel).expect("a new batch starts uninterrupted");
        cancel.cancel();
        assert!(next.is_cancelled(), "the user's cancel reaches the call");
        assert!(!s.end_call());
    }
}
