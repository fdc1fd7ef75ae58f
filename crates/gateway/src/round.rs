//! One round: the attempts of one request under one attempt budget (docs/design.md §4, §6.2).
//!
//! Owns: the retry loop around [`GatewayClient`]'s attempts — the waits, the whole-call
//! timeout, cancellation, the `Retry` events and the text a failed round had streamed. Every
//! decision to retry, re-run or stop is asked of `retry.rs` ([`RoundBudget`]); none is made
//! here. Must not touch: HTTP details (`client.rs`), history, or what the caller shows.

use bytes::Bytes;
use reqwest::header::HeaderMap;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::retry::{Decision, RoundBudget};
use super::{anthropic, openai, ApiStyle, CallOptions, GatewayClient, GatewayError, GatewayEvent, Prompt, Response};

/// A round that failed for good.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct RoundFailure {
    /// The last attempt's error (scrubbed of the key).
    pub error: GatewayError,
    /// The text streamed by the last attempt that streamed any: the partial answer the reader
    /// saw last (empty when no attempt streamed text). Also set on [`GatewayError::Cancelled`]:
    /// what had streamed when the user cancelled.
    pub partial: String,
    /// Attempts made in the round (0 when the request could not be built).
    pub attempts: u32,
}

impl GatewayClient {
    /// Sends `prompt` as one round and streams the answer: text/thinking deltas and retries
    /// are reported through `on_event` as they happen; the complete [`Response`] (with
    /// `prefix_sha256`) is returned at the end.
    ///
    /// The round has one attempt budget (`1 + max_retries`, see `retry.rs`): a retryable failure
    /// before any content is sent again; one after content began (a cut stream, an in-stream
    /// error) re-runs the round at most [`super::retry::ROUND_RERUNS`] times, after the same
    /// wait. Each is announced by [`GatewayEvent::Retry`] (`attempt` 1-based) before its wait;
    /// after a re-run's `Retry`, the deltas already reported are void. Errors
    /// ([`RoundFailure`]): the last attempt's error with the text it had streamed;
    /// [`GatewayError::Cancelled`] as soon as `cancel` fires (the stream or the wait is
    /// dropped; the text streamed so far comes with it); [`GatewayError::Timeout`] when
    /// `opts.timeout` runs out.
    pub async fn send_round(
        &self,
        prompt: &Prompt,
        opts: &CallOptions,
        on_event: &mut (dyn FnMut(GatewayEvent) + Send),
        cancel: &CancellationToken,
    ) -> Result<Response, RoundFailure> {
        let encoded = match self.settings.style {
            ApiStyle::Anthropic => anthropic::encode(prompt, &opts.model, opts.max_tokens),
            ApiStyle::Openai => openai::encode(prompt, &opts.model, opts.max_tokens),
        };
        let headers = self.headers(opts).map_err(|error| RoundFailure { error, partial: String::new(), attempts: 0 })?;
        let body = Bytes::from(encoded.body);
        let mut partial = String::new();
        let mut attempts = 0;
        let result = {
            let run = async {
                let run = self.run_round(&body, &headers, on_event, &mut partial, &mut attempts);
                match opts.timeout {
                    Some(limit) => tokio::time::timeout(limit, run).await.unwrap_or(Err(GatewayError::Timeout(limit.as_secs()))),
                    None => run.await,
                }
            };
            tokio::select! {
                biased;
                () = cancel.cancelled() => Err(GatewayError::Cancelled),
                r = run => r,
            }
        };
        match result {
            Ok(mut response) => {
                response.prefix_sha256 = encoded.prefix_sha256;
                Ok(response)
            }
            Err(e) => Err(RoundFailure { error: self.scrub(e), partial, attempts }),
        }
    }

    /// [`GatewayClient::send_round`] for callers that do not keep a partial answer (aux calls):
    /// the same round, its error alone.
    pub async fn send(
        &self,
        prompt: &Prompt,
        opts: &CallOptions,
        on_event: &mut (dyn FnMut(GatewayEvent) + Send),
        cancel: &CancellationToken,
    ) -> Result<Response, GatewayError> {
        self.send_round(prompt, opts, on_event, cancel).await.map_err(|f| f.error)
    }

    /// The attempts of one round. `partial` holds the text of the last attempt that streamed any,
    /// as far as it streamed (also when the round is dropped mid-stream by a cancel);
    /// `attempts` counts the attempts made.
    async fn run_round(
        &self,
        body: &Bytes,
        headers: &HeaderMap,
        on_event: &mut (dyn FnMut(GatewayEvent) + Send),
        partial: &mut String,
        attempts: &mut u32,
    ) -> Result<Response, GatewayError> {
        let mut budget = RoundBudget::new(self.policy);
        loop {
            let started = Instant::now();
            let mut content_started = false;
            let mut streamed = false;
            let result = {
                // Written as it streams, so a cancel (which drops this future) still leaves it.
                let mut forward = |ev: GatewayEvent| {
                    if let GatewayEvent::TextDelta(t) = &ev {
                        if !std::mem::replace(&mut streamed, true) {
                            partial.clear();
                        }
                        partial.push_str(t);
                    }
                    on_event(ev);
                };
                self.attempt(body, headers, &mut forward, &mut content_started).await
            };
            let err = match result {
                Ok(response) => return Ok(response),
                Err(e) => e,
            };
            let decision = budget.after_failure(&err, content_started, started, Instant::now(), rand::random::<f64>);
            *attempts = budget.attempts();
            let (delay, rerun) = match decision {
                Decision::Retry { delay, rerun } => (delay, rerun),
                Decision::Stop(why) => {
                    tracing::debug!(?why, attempts = *attempts, "gateway round gives up");
                    return Err(err);
                }
            };
            let reason = self.retry_reason(err);
            let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
            // info, not warn: the retry is an event every client shows (chat prints it on stderr).
            tracing::info!(attempt = *attempts, delay_ms, rerun, %reason, "gateway request failed; retrying");
            on_event(GatewayEvent::Retry { attempt: *attempts, delay_ms, reason });
            tokio::time::sleep(delay).await;
        }
    }

    /// What a retry line says: the (scrubbed) error, and how long it is tried (the retries of
    /// the round's budget, or for a refused connection the time), so the one line the CLI
    /// prints for identical retries tells the reader why they wait and for how long.
    fn retry_reason(&self, err: GatewayError) -> String {
        let connect = matches!(err, GatewayError::Connect { .. });
        let text = self.scrub(err).to_string();
        match (connect, self.policy.connect_retry_budget) {
            (false, _) => format!("{text}; up to {} retries this round", self.policy.max_retries),
            (true, Some(budget)) => format!("{text}; trying again for up to {} s", budget.as_secs_f64().ceil()),
            (true, None) => format!("{text}; trying again until it answers"),
        }
    }
}
