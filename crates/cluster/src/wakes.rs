//! Todo wakes as the engine's scheduled messages: the wake of todo `n` of agent `a` is a schedule
//! on `cicy.sched.a.n` in the stream `CICY_WAKES` (`allow_msg_schedules`), with
//! `Nats-Schedule: @at <RFC 3339, UTC>` and `Nats-Schedule-Target: cicy.wake.a.n`. At that time
//! the engine itself publishes the wake on the target subject, whichever server leads the
//! stream then; cicy runs no timer for it. One message per subject: scheduling a todo again
//! replaces its schedule, cancelling purges it. A durable consumer on `cicy.wake.>` hands the
//! fired wakes to whoever handles them, redelivering one not acknowledged in time.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use async_nats::HeaderMap;
use futures_util::StreamExt;

use crate::engine::{Engine, EngineError};

/// The stream of schedules and fired wakes.
pub const STREAM: &str = "CICY_WAKES";
/// **[chosen]** A fired wake not acknowledged in this long is delivered again.
const ACK_WAIT: Duration = Duration::from_secs(30);

/// A wake the engine fired: agent, todo, and the message to acknowledge once it is handled.
pub struct Fired {
    pub agent: String,
    pub todo: u32,
    message: jetstream::Message,
    url: String,
}

impl std::fmt::Debug for Fired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fired").field("agent", &self.agent).field("todo", &self.todo).finish_non_exhaustive()
    }
}

impl Fired {
    /// Says the wake is handled; it is not delivered again.
    pub async fn ack(self) -> Result<(), EngineError> {
        self.message.double_ack().await.map_err(|e| EngineError::jetstream(&self.url, "acknowledging a wake", e))
    }
}

/// The cluster's todo wakes.
#[derive(Debug, Clone)]
pub struct Wakes {
    jetstream: jetstream::Context,
    stream: stream::Stream,
    urls: String,
}

impl Wakes {
    /// Opens (creating it when missing) the stream, kept on `replicas` servers.
    pub async fn open(engine: &Engine, replicas: usize) -> Result<Wakes, EngineError> {
        let config = stream::Config {
            name: STREAM.to_string(),
            subjects: vec!["cicy.sched.>".into(), "cicy.wake.>".into()],
            max_messages_per_subject: 1,
            allow_message_schedules: true,
            num_replicas: replicas,
            ..Default::default()
        };
        let urls = engine.urls().to_string();
        let stream = engine
            .jetstream()
            .get_or_create_stream(config)
            .await
            .map_err(|e| EngineError::jetstream(&urls, format!("opening the stream {STREAM}"), e))?;
        Ok(Wakes { jetstream: engine.jetstream().clone(), stream, urls })
    }

    /// Schedules the wake of `agent`'s todo `todo` at `at` (RFC 3339 in UTC, e.g.
    /// `2026-12-08T10:00:00Z`), replacing the schedule it had.
    pub async fn schedule(&self, agent: &str, todo: u32, at: &str) -> Result<(), EngineError> {
        let mut headers = HeaderMap::new();
        headers.insert(async_nats::header::NATS_SCHEDULE, format!("@at {at}").as_str());
        headers.insert(async_nats::header::NATS_SCHEDULE_TARGET, format!("cicy.wake.{agent}.{todo}").as_str());
        let ack = self
            .jetstream
            .publish_with_headers(format!("cicy.sched.{agent}.{todo}"), headers, bytes::Bytes::new())
            .await
            .map_err(|e| EngineError::jetstream(&self.urls, "scheduling a wake", e))?;
        ack.await.map_err(|e| EngineError::jetstream(&self.urls, "scheduling a wake", e))?;
        Ok(())
    }

    /// Cancels the wake of `agent`'s todo `todo` (done or removed) if it has not fired.
    pub async fn cancel(&self, agent: &str, todo: u32) -> Result<(), EngineError> {
        self.stream
            .purge()
            .filter(format!("cicy.sched.{agent}.{todo}"))
            .await
            .map_err(|e| EngineError::jetstream(&self.urls, "cancelling a wake", e))?;
        Ok(())
    }

    /// How many fired wakes of `agent`'s todo `todo` the stream holds (0 or 1).
    pub async fn fired_count(&self, agent: &str, todo: u32) -> Result<u64, EngineError> {
        let subject = format!("cicy.wake.{agent}.{todo}");
        let stream = self.stream.clone();
        let mut subjects =
            stream.info_with_subjects(subject.clone()).await.map_err(|e| EngineError::jetstream(&self.urls, "counting fired wakes", e))?;
        let mut count = 0;
        while let Some(entry) = subjects.next().await {
            let (s, n) = entry.map_err(|e| EngineError::jetstream(&self.urls, "counting fired wakes", e))?;
            if s == subject {
                count += n as u64;
            }
        }
        Ok(count)
    }

    /// The fired wakes, as the durable consumer `name` delivers them (one consumer per handler
    /// group; a wake not acknowledged within 30 s comes again).
    pub async fn fired(&self, name: &str) -> Result<impl futures_util::Stream<Item = Result<Fired, EngineError>> + '_, EngineError> {
        let config = consumer::pull::Config {
            durable_name: Some(name.to_string()),
            filter_subject: "cicy.wake.>".into(),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: ACK_WAIT,
            ..Default::default()
        };
        let consumer = self
            .stream
            .get_or_create_consumer(name, config)
            .await
            .map_err(|e| EngineError::jetstream(&self.urls, "opening the wake consumer", e))?;
        let messages = consumer.messages().await.map_err(|e| EngineError::jetstream(&self.urls, "reading fired wakes", e))?;
        Ok(messages.map(move |m| {
            let message = m.map_err(|e| EngineError::jetstream(&self.urls, "reading a fired wake", e))?;
            let mut parts = message.subject.as_str().splitn(4, '.').skip(2);
            let (agent, todo) = (parts.next().unwrap_or_default().to_string(), parts.next().and_then(|t| t.parse().ok()));
            let todo =
                todo.ok_or_else(|| EngineError::jetstream(&self.urls, "reading a fired wake", format!("bad subject {}", message.subject)))?;
            Ok(Fired { agent, todo, message, url: self.urls.clone() })
        }))
    }
}
