//! The server-wide feed behind `GET /api/events` (docs/design.md §14 "live events"): every agent's
//! events in the order they were emitted, numbered with a global sequence (`gseq`), a ring of
//! the newest and live subscribers that can resume after a dropped connection.
//!
//! Owns only memory: the agents' own logs (`super::bus`) are what lasts; this feed is lost
//! with the process. A restarted serve numbers from its start time in microseconds, so a
//! client's cursor from an earlier run is older than the new ring and gets a gap rather than
//! a wrong replay. Publishing never waits for a subscriber: a slow one falls behind the live
//! channel and is refilled from the ring, or told of a gap.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::broadcast;

use super::Published;

/// **[chosen]** Events the ring keeps (about the text of 8 long answers at once); a client
/// further behind than this is told of a gap.
pub const GLOBAL_RING: usize = 8192;
/// Slots of the live channel; a subscriber further behind lags and is refilled from the ring.
const LIVE_CAPACITY: usize = 4096;

struct FeedState {
    /// The gseq the next event gets.
    next: u64,
    /// `(gseq, event)`, oldest first.
    ring: VecDeque<(u64, Published)>,
    live: broadcast::Sender<(u64, Published)>,
}

/// The feed; shared as `Arc<GlobalFeed>` by every agent's event log and the route.
pub struct GlobalFeed {
    /// The gseq of the first event this feed ever numbered.
    first: u64,
    state: Mutex<FeedState>,
}

/// What a [`GlobalSubscription`] yields.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// An event and its gseq.
    Event(u64, Published),
    /// Events `from..=to` (gseqs) cannot be replayed: the cursor is older than the ring, from
    /// another run of serve, or from the future. What the client shows may be stale.
    Gap { from: u64, to: u64 },
}

/// The feed's mutex guards a few plain fields updated together; a panicking holder leaves them
/// consistent, so poisoning is ignored.
fn lock(m: &Mutex<FeedState>) -> MutexGuard<'_, FeedState> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl GlobalFeed {
    /// A feed whose first event gets gseq `first` (at least 1).
    pub fn new(first: u64) -> Arc<GlobalFeed> {
        let (live, _) = broadcast::channel(LIVE_CAPACITY);
        let first = first.max(1);
        Arc::new(GlobalFeed { first, state: Mutex::new(FeedState { next: first, ring: VecDeque::with_capacity(GLOBAL_RING), live }) })
    }

    /// A feed numbered from now in unix microseconds (what serve uses): a cursor a client kept
    /// from an earlier run is then always older than this run's events, and gets a gap.
    pub fn starting_now() -> Arc<GlobalFeed> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        Self::new(now.map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(1)))
    }

    /// Numbers `ev`, keeps it in the ring and sends it to live subscribers; returns its gseq.
    /// Never blocks on a subscriber.
    pub fn publish(&self, ev: &Published) -> u64 {
        let mut st = lock(&self.state);
        let gseq = st.next;
        st.next += 1;
        if st.ring.len() == GLOBAL_RING {
            st.ring.pop_front();
        }
        st.ring.push_back((gseq, ev.clone()));
        // A send error only means nobody listens right now.
        let _ = st.live.send((gseq, ev.clone()));
        gseq
    }

    /// The gseq of the newest event, or `first - 1` when none was published.
    pub fn last(&self) -> u64 {
        lock(&self.state).next - 1
    }

    /// A stream of the feed. `None`: live from now. `Some(n)`: every event with gseq > n once
    /// and in order, then live; when the ring no longer reaches back to n + 1 (or n is not a
    /// gseq of this feed at all) an [`Item::Gap`] comes first, then what the ring has.
    pub fn subscribe(self: &Arc<Self>, after: Option<u64>) -> GlobalSubscription {
        let st = lock(&self.state);
        // Subscribed under the lock, before the ring is read (at the first `next`), so no event
        // falls between the replay and the live channel; duplicates are skipped by gseq.
        let rx = st.live.subscribe();
        let newest = st.next - 1;
        drop(st);
        let mut backlog = VecDeque::new();
        let last = match after {
            // Not a cursor of this run: everything this run sent so far is unknown to the
            // client; it goes on live from here. (When this run has sent nothing yet the gap
            // names the id just before its first, so `from <= to` always holds.)
            Some(n) if n > newest => {
                backlog.push_back(Item::Gap { from: self.first.min(newest), to: newest });
                newest
            }
            Some(n) => n,
            None => newest,
        };
        let catching_up = after.is_some_and(|n| n <= newest);
        GlobalSubscription { feed: Arc::clone(self), rx, last, catching_up, backlog }
    }
}

/// One client's place in the feed.
pub struct GlobalSubscription {
    feed: Arc<GlobalFeed>,
    rx: broadcast::Receiver<(u64, Published)>,
    /// The gseq of the last item handed out (or the cursor it started from).
    last: u64,
    /// True when the ring must be read before the live channel (a cursor, or a lag).
    catching_up: bool,
    backlog: VecDeque<Item>,
}

impl GlobalSubscription {
    /// The next item; `None` when the feed is gone.
    pub async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.try_next() {
                return Some(item);
            }
            match self.rx.recv().await {
                Ok((g, ev)) if g > self.last => {
                    self.last = g;
                    return Some(Item::Event(g, ev));
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => self.catching_up = true,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next item if one is ready without waiting (`None`: wait with [`Self::next`]).
    pub fn try_next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.backlog.pop_front() {
                if let Item::Event(g, _) = &item {
                    self.last = *g;
                }
                return Some(item);
            }
            if self.catching_up {
                self.catching_up = false;
                self.refill();
                continue;
            }
            match self.rx.try_recv() {
                Ok((g, ev)) if g > self.last => {
                    self.last = g;
                    return Some(Item::Event(g, ev));
                }
                Ok(_) => {}
                Err(broadcast::error::TryRecvError::Lagged(_)) => self.catching_up = true,
                Err(_) => return None,
            }
        }
    }

    /// Queues what the ring holds after `last`, with a gap first when it does not reach back.
    fn refill(&mut self) {
        let st = lock(&self.feed.state);
        let oldest = st.ring.front().map_or(st.next, |(g, _)| *g);
        if self.last + 1 < oldest {
            self.backlog.push_back(Item::Gap { from: self.last + 1, to: oldest - 1 });
        }
        let after = self.last;
        self.backlog.extend(st.ring.iter().filter(|(g, _)| *g > after).map(|(g, ev)| Item::Event(*g, ev.clone())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cicy_protocol::event::EventKind;

    fn ev(agent: &str, seq: u64) -> Published {
        cicy_protocol::event::Event { seq, agent_id: agent.into(), kind: EventKind::TextDelta { text: format!("{agent}:{seq}") } }.into()
    }

    fn gseqs(items: &[Item]) -> Vec<u64> {
        items.iter().filter_map(|i| if let Item::Event(g, _) = i { Some(*g) } else { None }).collect()
    }

    async fn take(sub: &mut GlobalSubscription, n: usize) -> Vec<Item> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(tokio::time::timeout(std::time::Duration::from_secs(30), sub.next()).await.unwrap().unwrap());
        }
        out
    }

    #[tokio::test]
    async fn live_subscribers_get_every_event_with_increasing_gseqs() {
        let feed = GlobalFeed::new(100);
        let mut sub = feed.subscribe(None);
        assert_eq!(feed.publish(&ev("w-1", 1)), 100);
        assert_eq!(feed.publish(&ev("w-2", 1)), 101);
        let items = take(&mut sub, 2).await;
        assert_eq!(items, vec![Item::Event(100, ev("w-1", 1)), Item::Event(101, ev("w-2", 1))]);
        assert_eq!(feed.last(), 101);
    }

    #[tokio::test]
    async fn a_cursor_replays_exactly_what_came_after_it_then_goes_live() {
        let feed = GlobalFeed::new(1);
        for s in 1..=5 {
            feed.publish(&ev("w-1", s));
        }
        let mut sub = feed.subscribe(Some(3));
        feed.publish(&ev("w-1", 6));
        let items = take(&mut sub, 3).await;
        assert_eq!(gseqs(&items), vec![4, 5, 6]);
        feed.publish(&ev("w-1", 7));
        assert_eq!(take(&mut sub, 1).await, vec![Item::Event(7, ev("w-1", 7))]);
    }

    #[tokio::test]
    async fn a_cursor_older_than_the_ring_gets_a_gap_then_the_whole_ring() {
        let feed = GlobalFeed::new(1);
        let total = GLOBAL_RING as u64 + 10;
        for s in 1..=total {
            feed.publish(&ev("w-1", s));
        }
        let mut sub = feed.subscribe(Some(5));
        let first = take(&mut sub, 2).await;
        assert_eq!(first[0], Item::Gap { from: 6, to: 10 });
        assert_eq!(first[1], Item::Event(11, ev("w-1", 11)));
    }

    #[tokio::test]
    async fn a_cursor_from_another_run_gets_a_gap_and_then_only_live_events() {
        let feed = GlobalFeed::new(1_000);
        feed.publish(&ev("w-1", 1));
        let mut sub = feed.subscribe(Some(5_000));
        feed.publish(&ev("w-1", 2));
        let items = take(&mut sub, 2).await;
        assert_eq!(items, vec![Item::Gap { from: 1_000, to: 1_000 }, Item::Event(1_001, ev("w-1", 2))]);
    }

    #[tokio::test]
    async fn a_cursor_ahead_of_a_feed_that_sent_nothing_gets_a_well_formed_gap() {
        let feed = GlobalFeed::new(1_000);
        let mut sub = feed.subscribe(Some(u64::MAX));
        feed.publish(&ev("w-1", 1));
        let items = take(&mut sub, 2).await;
        assert_eq!(items, vec![Item::Gap { from: 999, to: 999 }, Item::Event(1_000, ev("w-1", 1))]);
    }

    #[tokio::test]
    async fn a_subscriber_that_lags_is_refilled_from_the_ring_without_holes() {
        let feed = GlobalFeed::new(1);
        let mut sub = feed.subscribe(None);
        let total = LIVE_CAPACITY as u64 * 2;
        for s in 1..=total {
            feed.publish(&ev("w-1", s));
        }
        let items = take(&mut sub, total as usize).await;
        assert_eq!(gseqs(&items), (1..=total).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_subscriber_further_behind_than_the_ring_gets_one_gap_and_no_duplicate() {
        let feed = GlobalFeed::new(1);
        let mut sub = feed.subscribe(None);
        let total = GLOBAL_RING as u64 + 100;
        for s in 1..=total {
            feed.publish(&ev("w-1", s));
        }
        let items = take(&mut sub, GLOBAL_RING + 1).await;
        assert_eq!(items[0], Item::Gap { from: 1, to: 100 });
        assert_eq!(gseqs(&items[1..]), (101..=total).collect::<Vec<_>>());
    }
}
