//! The pace of the event routes' streams (`GET /api/agents/{id}/events`, `GET /api/events`):
//! during a burst a client's stream wakes once per [`GATHER`] and writes what gathered in one
//! go, instead of waking and writing once per event. Owns no state but each stream's own.
//!
//! Must not touch the agent's side: publishing stays one shared value per event
//! ([`crate::eventlog::Published`]); what a slow client cannot keep up with is refilled or
//! told of a gap by the subscription itself.

use std::future::Future;
use std::time::Duration;

use futures_util::stream::{self, Stream};

use crate::eventlog::global::Item;
use crate::eventlog::{GlobalSubscription, Published, Subscription};

/// **[chosen]** How long a stream in a burst waits before it takes what gathered: 200 clients
/// that each woke and wrote per event made one 20,000-delta answer 10–20× slower; at 20 ms a
/// client wakes 50 times a second at most, and a live view lags by no more than that.
pub const GATHER: Duration = Duration::from_millis(20);

/// A subscription a stream can pace.
pub trait Feed: Send + 'static {
    type Item: Send + 'static;
    /// An item that is ready now, without waiting.
    fn ready(&mut self) -> Option<Self::Item>;
    /// The next item, waiting for it; `None` at the end.
    fn wait(&mut self) -> impl Future<Output = Option<Self::Item>> + Send + '_;
}

impl Feed for Subscription {
    type Item = Published;
    fn ready(&mut self) -> Option<Published> {
        self.try_next()
    }
    fn wait(&mut self) -> impl Future<Output = Option<Published>> + Send + '_ {
        self.next()
    }
}

impl Feed for GlobalSubscription {
    type Item = Item;
    fn ready(&mut self) -> Option<Item> {
        self.try_next()
    }
    fn wait(&mut self) -> impl Future<Output = Option<Item>> + Send + '_ {
        self.next()
    }
}

/// Every item of `feed`: what is ready at once, then, when the burst goes on, after a pause
/// of [`GATHER`]; the first item after a quiet spell goes out as soon as it comes.
pub fn gathered<F: Feed>(feed: F) -> impl Stream<Item = F::Item> + Send {
    stream::unfold((feed, false), |(mut feed, in_burst)| async move {
        if let Some(item) = feed.ready() {
            return Some((item, (feed, true)));
        }
        if in_burst {
            tokio::time::sleep(GATHER).await;
            if let Some(item) = feed.ready() {
                return Some((item, (feed, true)));
            }
        }
        let item = feed.wait().await?;
        Some((item, (feed, true)))
    })
}
