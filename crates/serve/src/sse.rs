//! The bytes of every SSE response serve writes: frames, the `: ping` comment, and the pace of
//! the event routes (`GET /api/agents/{id}/events`, `GET /api/events`). Owns no state but each
//! stream's own.
//!
//! A frame is `event: <type>\ndata: <JSON>\n[id: <n>\n]\n`, written straight into the
//! stream's buffer from the encoding every subscriber of the event shares
//! ([`cicy_store::eventlog::Published`]). During a burst an event route's stream wakes once per
//! [`GATHER`] and writes every frame that gathered as one body chunk, so 200 clients cost 200
//! small writes per pause, not 200 per event.
//!
//! Must not touch the agent's side: publishing stays one shared value per event; what a slow
//! client cannot keep up with is refilled or told of a gap by the subscription itself.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::stream::{self, Stream, StreamExt};
use futures_util::FutureExt;
use tokio_util::sync::WaitForCancellationFutureOwned;

use cicy_store::eventlog::global::Item;
use cicy_store::eventlog::{GlobalSubscription, Published, Subscription};

/// cicy: a `: ping` comment after 15 s without a frame keeps proxies from closing an idle
/// stream.
pub(super) const PING: Duration = Duration::from_secs(15);

/// **[chosen]** How long a stream in a burst waits before it takes what gathered: 200 clients
/// that each woke and wrote per event made one 20,000-delta answer 10–20× slower; at 20 ms a
/// client wakes 50 times a second at most, and a live view lags by no more than that.
pub(super) const GATHER: Duration = Duration::from_millis(20);

/// **[chosen]** A chunk is cut once it holds this much, so a client far behind (a replay of
/// thousands of events) is written in pieces instead of one buffer of everything.
const CHUNK: usize = 64 * 1024;

const PING_FRAME: &[u8] = b": ping\n\n";

/// Appends one frame. `data` is one line (compact JSON never holds a raw newline).
pub(super) fn put_frame(buf: &mut BytesMut, event: &str, data: &str, id: Option<u64>) {
    buf.extend_from_slice(b"event: ");
    buf.extend_from_slice(event.as_bytes());
    buf.extend_from_slice(b"\ndata: ");
    buf.extend_from_slice(data.as_bytes());
    buf.extend_from_slice(b"\n");
    if let Some(id) = id {
        // Writing into a BytesMut cannot fail; it grows.
        let _ = writeln!(buf, "id: {id}");
    }
    buf.extend_from_slice(b"\n");
}

/// Appends an event's frame; an event in the agent's log carries its seq as `id:`, one about
/// a single request (seq 0) none.
pub(super) fn put_event(buf: &mut BytesMut, ev: &Published) {
    put_frame(buf, ev.type_name(), ev.json(), (ev.seq != 0).then_some(ev.seq));
}

/// The response: `text/event-stream`, `no-cache`, the chunks of `body` with a ping after
/// each [`PING`] without one, ending when `body` does or, once `shutdown` fires, when `body`
/// has nothing more ready: the `turn_ended` and `done` a stopping actor emitted just before
/// serve's shutdown still reach a chat's stream, and an `/events` stream ends at once.
pub(super) fn response(body: impl Stream<Item = Bytes> + Send + 'static, shutdown: WaitForCancellationFutureOwned) -> Response {
    let body = Box::pin(body);
    let pinged = Box::pin(stream::unfold(body, |mut body| async move {
        match tokio::time::timeout(PING, body.next()).await {
            Ok(Some(chunk)) => Some((chunk, body)),
            Ok(None) => None,
            Err(_) => Some((Bytes::from_static(PING_FRAME), body)),
        }
    }));
    let chunks = stream::unfold((pinged, Some(Box::pin(shutdown))), |(mut body, mut shutdown)| async move {
        if let Some(stop) = shutdown.as_mut() {
            tokio::select! {
                biased;
                chunk = body.next() => return chunk.map(|c| (c, (body, shutdown))),
                () = stop => {}
            }
        }
        // Shutting down: what is ready now, then the end.
        body.next().now_or_never().flatten().map(|c| (c, (body, None)))
    })
    .map(Ok::<_, Infallible>);
    ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], Body::from_stream(chunks)).into_response()
}

/// Each event of `events` as a chunk of its own, as soon as it comes (a chat's own stream).
pub(super) fn each(events: impl Stream<Item = Published> + Send + 'static) -> impl Stream<Item = Bytes> + Send {
    events.map(|ev| {
        let mut buf = BytesMut::new();
        put_event(&mut buf, &ev);
        buf.freeze()
    })
}

/// A subscription an event route can pace.
pub(super) trait Feed: Send + 'static {
    type Item: Send + 'static;
    /// An item that is ready now, without waiting.
    fn ready(&mut self) -> Option<Self::Item>;
    /// The next item, waiting for it; `None` at the end.
    fn wait(&mut self) -> impl Future<Output = Option<Self::Item>> + Send + '_;
    /// Appends the item's frame.
    fn put(buf: &mut BytesMut, item: &Self::Item);
}

impl Feed for Subscription {
    type Item = Published;
    fn ready(&mut self) -> Option<Published> {
        self.try_next()
    }
    fn wait(&mut self) -> impl Future<Output = Option<Published>> + Send + '_ {
        self.next()
    }
    fn put(buf: &mut BytesMut, ev: &Published) {
        put_event(buf, ev);
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
    /// Frames carry the server-wide gseq as `id:`; a gap has none.
    fn put(buf: &mut BytesMut, item: &Item) {
        match item {
            Item::Event(gseq, ev) => put_frame(buf, ev.type_name(), ev.json(), Some(*gseq)),
            Item::Gap { from, to } => put_frame(buf, "gap", &format!("{{\"from\":{from},\"to\":{to}}}"), None),
        }
    }
}

/// Appends every item that is ready, up to [`CHUNK`] bytes.
fn take_ready<F: Feed>(feed: &mut F, buf: &mut BytesMut) {
    while buf.len() < CHUNK {
        match feed.ready() {
            Some(item) => F::put(buf, &item),
            None => break,
        }
    }
}

/// The frames of `feed` in chunks: what is ready at once, then, while the burst goes on,
/// what gathered in each [`GATHER`]; the first item after a quiet spell goes out as soon as
/// it comes.
pub(super) fn gathered<F: Feed>(feed: F) -> impl Stream<Item = Bytes> + Send {
    stream::unfold((feed, false), |(mut feed, in_burst)| async move {
        let mut buf = BytesMut::new();
        take_ready(&mut feed, &mut buf);
        if buf.is_empty() && in_burst {
            tokio::time::sleep(GATHER).await;
            take_ready(&mut feed, &mut buf);
        }
        if buf.is_empty() {
            let item = feed.wait().await?;
            F::put(&mut buf, &item);
            take_ready(&mut feed, &mut buf);
        }
        Some((buf.freeze(), (feed, true)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cicy_protocol::event::{Event, EventKind};

    fn delta(seq: u64, text: &str) -> Published {
        Event { seq, agent_id: "w-1".into(), kind: EventKind::TextDelta { text: text.into() } }.into()
    }

    /// A stopping actor emits `turn_ended` and `done` just before serve's shutdown fires: a
    /// stream still sends what is ready, then ends, even one whose body never ends by itself.
    #[tokio::test]
    async fn after_shutdown_a_stream_sends_what_is_ready_and_then_ends() {
        let token = tokio_util::sync::CancellationToken::new();
        token.cancel();
        let ready = stream::iter([Bytes::from_static(b"event: turn_ended\n\n"), Bytes::from_static(b"event: done\n\n")]);
        let response = super::response(ready.chain(stream::pending()), token.cancelled_owned());
        let body = tokio::time::timeout(Duration::from_secs(10), axum::body::to_bytes(response.into_body(), usize::MAX)).await;
        assert_eq!(&body.expect("the stream ended").unwrap()[..], b"event: turn_ended\n\nevent: done\n\n");
    }

    #[test]
    fn a_logged_event_carries_its_seq_and_a_request_s_own_none() {
        let mut buf = BytesMut::new();
        put_event(&mut buf, &delta(7, "Hi"));
        put_event(&mut buf, &delta(0, "x"));
        assert_eq!(
            std::str::from_utf8(&buf).unwrap(),
            "event: text_delta\ndata: {\"seq\":7,\"agent_id\":\"w-1\",\"type\":\"text_delta\",\"text\":\"Hi\"}\nid: 7\n\n\
             event: text_delta\ndata: {\"seq\":0,\"agent_id\":\"w-1\",\"type\":\"text_delta\",\"text\":\"x\"}\n\n"
        );
    }

    /// A feed the test fills by hand.
    struct Queue(tokio::sync::mpsc::UnboundedReceiver<Published>);

    impl Feed for Queue {
        type Item = Published;
        fn ready(&mut self) -> Option<Published> {
            self.0.try_recv().ok()
        }
        fn wait(&mut self) -> impl Future<Output = Option<Published>> + Send + '_ {
            self.0.recv()
        }
        fn put(buf: &mut BytesMut, ev: &Published) {
            put_event(buf, ev);
        }
    }

    fn frames(seqs: std::ops::Range<u64>) -> Vec<u8> {
        let mut buf = BytesMut::new();
        for seq in seqs {
            put_event(&mut buf, &delta(seq, "w"));
        }
        buf.to_vec()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_written_in_chunks_paced_by_the_gather_pause() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut chunks = Box::pin(gathered(Queue(rx)));
        let t0 = tokio::time::Instant::now();
        // 1,000 frames of ~90 bytes ready at once: cut at 64 KiB, the rest without a pause.
        for seq in 1..=1000 {
            tx.send(delta(seq, "w")).unwrap();
        }
        let first = chunks.next().await.unwrap();
        let second = chunks.next().await.unwrap();
        assert!(first.len() >= CHUNK && first.len() < CHUNK + 200, "{}", first.len());
        assert!([&first[..], &second[..]].concat() == frames(1..1001), "the two chunks are not the 1,000 frames in order");
        assert_eq!(t0.elapsed(), Duration::ZERO);
        // Events that come while the burst goes on wait for the pause and go out together.
        let late = tokio::spawn(async move {
            for seq in [1001, 1002] {
                tokio::time::sleep(Duration::from_millis(5)).await;
                tx.send(delta(seq, "w")).unwrap();
            }
            // After a quiet spell the first event goes out the moment it comes.
            tokio::time::sleep(Duration::from_secs(1)).await;
            tx.send(delta(1003, "w")).unwrap();
            tx
        });
        assert_eq!(chunks.next().await.unwrap(), frames(1001..1003));
        assert_eq!(t0.elapsed(), GATHER);
        assert_eq!(chunks.next().await.unwrap(), frames(1003..1004));
        assert_eq!(t0.elapsed(), Duration::from_millis(10) + Duration::from_secs(1));
        drop(late.await.unwrap());
        assert!(chunks.next().await.is_none());
    }

    #[test]
    fn a_gap_frame_has_no_id() {
        let mut buf = BytesMut::new();
        GlobalSubscription::put(&mut buf, &Item::Gap { from: 3, to: 9 });
        assert_eq!(&buf[..], b"event: gap\ndata: {\"from\":3,\"to\":9}\n\n");
    }
}
