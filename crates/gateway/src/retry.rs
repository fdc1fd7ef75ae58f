//! The one retry layer's decisions: which failures are retried, how long to wait, and when a
//! round's one attempt budget is spent.
//!
//! Owns: pure functions over a [`GatewayError`] and header values, and [`RoundBudget`], the
//! retry state of one round. Must not touch: sockets, clocks other than a passed-in `now`,
//! random numbers other than a passed-in jitter source, or events — `client.rs` does the
//! waiting, the cancelling and the reporting, and the turn loop only reads the outcome.
//!
//! Numbers *(cicy, docs/design.md §4, §6.2)*: one budget of `1 + max_retries` attempts per round (10
//! retries); a failure before any content streamed is retried; a failure after content began
//! (stream cut, in-stream error) re-runs the round at most 2 times, out of the same budget and
//! after the same wait; `retry-after` is a floor capped at 60 s; otherwise `min(0.5·2^n, 8)` s ×
//! jitter in [0.75, 1] with n = 0 for the first retry. Refused connections are retried for at
//! most 10 s by default ([`RetryPolicy::connect_retry_budget`]). An error that repeats
//! identically and does not ask to wait (a plain 500, an in-stream `api_error`, a gateway silent
//! for the whole idle timeout) stops after its second occurrence ([`repeat_is_final`]).

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::GatewayError;

/// cicy: a round whose stream failed after content began is re-run at most 2 times.
pub const ROUND_RERUNS: u32 = 2;

/// cicy: how long a one-shot command keeps retrying a gateway that refuses connections.
pub const CONNECT_RETRY_BUDGET: Duration = Duration::from_secs(10);

/// Retry numbers. [`Default`] gives cicy's: 10 retries, 0.5 s base, 8 s ceiling, 60 s cap on
/// `retry-after`, 2 re-runs after content, 10 s for refused connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt of a round, re-runs included (cicy: 10).
    pub max_retries: u32,
    /// Backoff of the first retry before jitter (cicy: 0.5 s). Tests make it tiny.
    pub base_delay: Duration,
    /// Ceiling of the exponential backoff before jitter (cicy: 8 s).
    pub max_delay: Duration,
    /// Ceiling applied to a server's `retry-after` (cicy: 60 s).
    pub retry_after_cap: Duration,
    /// Re-runs of a round whose stream failed after content began (cicy: [`ROUND_RERUNS`]).
    pub max_reruns: u32,
    /// Connection failures ([`GatewayError::Connect`]) in a row are retried while less than
    /// this much time has passed since the first of them began, the last wait shortened to fit
    /// (cicy: [`CONNECT_RETRY_BUDGET`] for one-shot commands); they also spend the attempt
    /// budget. `None`: retried with backoff until the gateway answers, the call's timeout or a
    /// cancel, without spending the attempt budget — for a resident server that must outlive a
    /// gateway restart.
    pub connect_retry_budget: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 10,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            retry_after_cap: Duration::from_secs(60),
            max_reruns: ROUND_RERUNS,
            connect_retry_budget: Some(CONNECT_RETRY_BUDGET),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `attempt` (0-based: 0 is the first retry).
    ///
    /// Backoff = `min(base_delay · 2^attempt, max_delay) × (1 − 0.25·u)` where `u =
    /// jitter_source()` is a uniform sample in [0, 1] (clamped), so the factor lies in [0.75, 1].
    /// With a server `retry_after`, the wait is `max(min(retry_after, retry_after_cap), backoff)`:
    /// the server's value is a minimum, but never more than the cap.
    pub fn delay_for(&self, attempt: u32, retry_after: Option<Duration>, jitter_source: impl FnOnce() -> f64) -> Duration {
        let u = jitter_source();
        let u = if u.is_finite() { u.clamp(0.0, 1.0) } else { 0.0 };
        // 2^30 already exceeds any sensible ceiling; the clamp keeps the float finite.
        let exp = self.base_delay.as_secs_f64() * 2f64.powi(attempt.min(30) as i32);
        let capped = exp.min(self.max_delay.as_secs_f64());
        let backoff = Duration::try_from_secs_f64(capped * (1.0 - 0.25 * u)).unwrap_or(self.max_delay);
        match retry_after {
            Some(ra) => ra.min(self.retry_after_cap).max(backoff),
            None => backoff,
        }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send the round again after `delay`. `rerun`: content of the failed attempt had already
    /// streamed, so the round starts over and what was shown of it is discarded.
    Retry { delay: Duration, rerun: bool },
    /// Give up: the error is the round's result.
    Stop(StopReason),
}

/// Why a round stopped retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The error cannot succeed on another attempt ([`classify`]).
    NotRetryable,
    /// The round's `1 + max_retries` attempts are used up.
    AttemptsSpent,
    /// Content had streamed and the `max_reruns` re-runs are used up.
    RerunsSpent,
    /// The same error twice in a row, of a kind that repeats when it is permanent
    /// ([`repeat_is_final`]).
    Repeated,
    /// Connections were refused for [`RetryPolicy::connect_retry_budget`].
    ConnectBudgetSpent,
}

/// The retry state of one round: one attempt budget shared by the retries before content and
/// the re-runs after it. Create one per round and tell it every failure in order.
#[derive(Debug, Clone)]
pub struct RoundBudget {
    policy: RetryPolicy,
    /// Attempts made so far, the first included.
    attempts: u32,
    /// Waits so far (the backoff exponent; connection waits of an unlimited budget count too).
    waits: u32,
    reruns: u32,
    /// When the first of the current run of connection failures began.
    connect_since: Option<Instant>,
    /// The last failure's text, when it is of a kind whose repeat is final.
    last: Option<String>,
}

impl RoundBudget {
    pub fn new(policy: RetryPolicy) -> Self {
        Self { policy, attempts: 0, waits: 0, reruns: 0, connect_since: None, last: None }
    }

    /// Attempts told so far (each [`RoundBudget::after_failure`] call is one).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Decides after a failed attempt that began at `started` and failed at `now`;
    /// `content_started` says whether any content of it had streamed. `jitter_source` gives a
    /// uniform sample in [0, 1] ([`RetryPolicy::delay_for`]). The order of the checks:
    /// retryable at all, identical repeat, re-runs left, connection time budget, attempts left.
    pub fn after_failure(
        &mut self,
        err: &GatewayError,
        content_started: bool,
        started: Instant,
        now: Instant,
        jitter_source: impl FnOnce() -> f64,
    ) -> Decision {
        self.attempts += 1;
        if !classify(err) {
            return Decision::Stop(StopReason::NotRetryable);
        }
        let text = repeat_is_final(err).then(|| err.to_string());
        let repeated = text.is_some() && text == self.last;
        self.last = text;
        if repeated {
            return Decision::Stop(StopReason::Repeated);
        }
        if content_started && self.reruns >= self.policy.max_reruns {
            return Decision::Stop(StopReason::RerunsSpent);
        }
        let connect = matches!(err, GatewayError::Connect { .. });
        let since = if connect { *self.connect_since.get_or_insert(started) } else { now };
        if !connect {
            self.connect_since = None;
        }
        let unlimited = connect && self.policy.connect_retry_budget.is_none();
        if !unlimited && self.attempts > self.policy.max_retries {
            return Decision::Stop(StopReason::AttemptsSpent);
        }
        let mut delay = self.policy.delay_for(self.waits, retry_after(err), jitter_source);
        if let (true, Some(budget)) = (connect, self.policy.connect_retry_budget) {
            let spent = now.saturating_duration_since(since);
            if spent >= budget {
                return Decision::Stop(StopReason::ConnectBudgetSpent);
            }
            delay = delay.min(budget - spent);
        }
        self.waits += 1;
        if content_started {
            self.reruns += 1;
        }
        Decision::Retry { delay, rerun: content_started }
    }
}

/// The server's `retry-after` of a status error.
fn retry_after(err: &GatewayError) -> Option<Duration> {
    match err {
        GatewayError::Status { retry_after_ms: Some(ms), .. } => Some(Duration::from_millis(*ms)),
        _ => None,
    }
}

/// Whether the same error twice in a row means it will not go away: a 5xx that is not one of
/// the "busy, come back later" answers (502, 503, 504, 529) and carries neither `retry-after`
/// nor `x-should-retry`, and an in-stream error other than `overloaded_error` (e.g. LiteLLM's
/// `api_error` for a refused upstream key), and a gateway that went silent for the whole idle
/// timeout twice (a third wait of up to `idle_timeout_secs` rarely ends differently, and eleven
/// of them would keep a command waiting for most of an hour). Rate limits and overload repeat
/// identically while they last, so they are retried to the end of the budget.
pub fn repeat_is_final(err: &GatewayError) -> bool {
    match err {
        GatewayError::Timeout(_) => true,
        GatewayError::Status { status, retry_after_ms, should_retry, .. } => {
            retry_after_ms.is_none() && should_retry.is_none() && (500..600).contains(status) && !matches!(status, 502..=504 | 529)
        }
        GatewayError::StreamError { kind, .. } => kind != "overloaded_error",
        GatewayError::Connect { .. }
        | GatewayError::NoKey { .. }
        | GatewayError::NotFound { .. }
        | GatewayError::Incomplete(_)
        | GatewayError::Decode(_)
        | GatewayError::Cancelled => false,
    }
}

/// Is this failure worth another attempt? Before content this means a retry, after content a
/// re-run of the round ([`RoundBudget`] counts both).
///
/// Retryable: connection errors ([`GatewayError::Connect`]); HTTP 408, 409, 429 and every 5xx
/// (529 "overloaded" included) unless the server's `x-should-retry` said otherwise — and any
/// status when it said `true`; in-stream `overloaded_error` and `api_error`; a stream that ended
/// or went silent ([`GatewayError::Incomplete`], [`GatewayError::Timeout`] from the idle timer).
/// Not retryable: a context overflow (`super::overflow::detect`), other statuses (a 404 and a refusal without a key included), other stream
/// errors, decode errors (a body cicy cannot read reads no better the next time), cancel.
pub fn classify(err: &GatewayError) -> bool {
    // The same request over the context window is refused again whatever the status says; the
    // turn learns the window and compacts instead (`super::overflow`).
    if super::overflow::detect(err).is_some() {
        return false;
    }
    match err {
        GatewayError::Connect { .. } | GatewayError::Incomplete(_) | GatewayError::Timeout(_) => true,
        GatewayError::Status { status, should_retry, .. } => should_retry.unwrap_or_else(|| status_retryable(*status)),
        GatewayError::StreamError { kind, .. } => matches!(kind.as_str(), "overloaded_error" | "api_error"),
        GatewayError::NoKey { .. } | GatewayError::NotFound { .. } | GatewayError::Decode(_) | GatewayError::Cancelled => false,
    }
}

/// 408, 409, 429 and 500–599 (which includes Anthropic's 529).
pub fn status_retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500..=599)
}

/// Parses a `retry-after` value: delay-seconds (integer, or a decimal as some gateways send) or
/// an HTTP date (RFC 9110, via `httpdate`), relative to `now`. A date in the past is zero.
/// Returns `None` for anything else.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parses `retry-after-ms` (milliseconds, as Anthropic and OpenAI send beside `retry-after`).
pub fn parse_retry_after_ms(value: &str) -> Option<Duration> {
    let ms = value.trim().parse::<f64>().ok()?;
    Duration::try_from_secs_f64(ms / 1000.0).ok()
}

/// Parses `x-should-retry`: `true` or `false` (case-insensitive); anything else is `None`.
pub fn parse_should_retry(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn status(status: u16, should_retry: Option<bool>) -> GatewayError {
        GatewayError::Status { status, body: String::new(), retry_after_ms: None, should_retry }
    }

    #[test]
    fn backoff_is_exact() {
        let p = RetryPolicy::default();
        // u = 0 → factor 1; u = 1 → factor 0.75.
        assert_eq!(p.delay_for(0, None, || 0.0), ms(500));
        assert_eq!(p.delay_for(0, None, || 1.0), ms(375));
        assert_eq!(p.delay_for(1, None, || 0.0), ms(1000));
        assert_eq!(p.delay_for(2, None, || 0.5), ms(1750));
        assert_eq!(p.delay_for(3, None, || 1.0), ms(3000));
        assert_eq!(p.delay_for(4, None, || 0.0), ms(8000));
        assert_eq!(p.delay_for(5, None, || 0.0), ms(8000));
        assert_eq!(p.delay_for(9, None, || 1.0), ms(6000));
        assert_eq!(p.delay_for(u32::MAX, None, || 0.0), ms(8000));
        // Out-of-range jitter samples are clamped.
        assert_eq!(p.delay_for(0, None, || 7.0), ms(375));
        assert_eq!(p.delay_for(0, None, || f64::NAN), ms(500));
    }

    #[test]
    fn retry_after_is_a_capped_minimum() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay_for(0, Some(Duration::from_secs(2)), || 0.0), ms(2000));
        assert_eq!(p.delay_for(0, Some(Duration::from_secs(120)), || 0.0), ms(60_000));
        // Smaller than the backoff: the backoff wins.
        assert_eq!(p.delay_for(4, Some(Duration::from_secs(1)), || 0.0), ms(8000));
        assert_eq!(p.delay_for(0, Some(Duration::ZERO), || 1.0), ms(375));
    }

    #[test]
    fn classify_statuses() {
        for s in [408, 409, 429, 500, 502, 503, 504, 529, 599] {
            assert!(classify(&status(s, None)), "{s}");
        }
        for s in [400, 401, 403, 404, 413, 422, 600] {
            assert!(!classify(&status(s, None)), "{s}");
        }
        assert!(!classify(&status(503, Some(false))));
        assert!(classify(&status(400, Some(true))));
    }

    #[test]
    fn classify_other_errors() {
        let stream = |k: &str| GatewayError::StreamError { kind: k.into(), message: "m".into() };
        assert!(classify(&stream("overloaded_error")));
        assert!(classify(&stream("api_error")));
        assert!(!classify(&stream("invalid_request_error")));
        assert!(classify(&GatewayError::Connect { url: "u".into(), message: "refused".into() }));
        assert!(classify(&GatewayError::Incomplete("cut".into())));
        assert!(classify(&GatewayError::Timeout(30)));
        assert!(!classify(&GatewayError::Decode("x".into())));
        assert!(!classify(&GatewayError::Cancelled));
    }

    /// Feeds `errs` (with whether content had streamed) to a fresh budget, each failing the
    /// instant it began and the next attempt starting after the wait; jitter factor 1.
    fn run(policy: RetryPolicy, errs: &[(GatewayError, bool)]) -> (Vec<Decision>, RoundBudget) {
        let mut b = RoundBudget::new(policy);
        let mut now = Instant::now();
        let mut out = Vec::new();
        for (e, content) in errs {
            let d = b.after_failure(e, *content, now, now, || 0.0);
            if let Decision::Retry { delay, .. } = d {
                now += delay;
            }
            out.push(d);
        }
        (out, b)
    }

    fn retry(ms_: u64, rerun: bool) -> Decision {
        Decision::Retry { delay: ms(ms_), rerun }
    }

    #[test]
    fn a_429_forever_gets_one_budget_of_eleven_attempts_and_honours_retry_after() {
        let e = GatewayError::Status { status: 429, body: "slow down".into(), retry_after_ms: Some(1000), should_retry: None };
        let errs: Vec<_> = (0..11).map(|_| (e.clone(), false)).collect();
        let (d, b) = run(RetryPolicy::default(), &errs);
        let waits = [1000, 1000, 2000, 4000, 8000, 8000, 8000, 8000, 8000, 8000];
        let mut want: Vec<_> = waits.iter().map(|w| retry(*w, false)).collect();
        want.push(Decision::Stop(StopReason::AttemptsSpent));
        assert_eq!(d, want);
        assert_eq!(b.attempts(), 11);
    }

    #[test]
    fn reruns_after_content_are_at_most_two_and_share_the_budget() {
        let cut = GatewayError::Incomplete("connection lost".into());
        let (d, _) = run(RetryPolicy::default(), &[(cut.clone(), true), (cut.clone(), true), (cut.clone(), true)]);
        assert_eq!(d, vec![retry(500, true), retry(1000, true), Decision::Stop(StopReason::RerunsSpent)]);
        // Two retries before content spend the budget of a 2-retry policy: no re-run is left.
        let p = RetryPolicy { max_retries: 2, ..RetryPolicy::default() };
        let (d, _) = run(p, &[(cut.clone(), false), (cut.clone(), false), (cut, true)]);
        assert_eq!(d, vec![retry(500, false), retry(1000, false), Decision::Stop(StopReason::AttemptsSpent)]);
        // Not retryable whether or not content came.
        let bad = GatewayError::Decode("not UTF-8".into());
        assert_eq!(run(RetryPolicy::default(), &[(bad, true)]).0, vec![Decision::Stop(StopReason::NotRetryable)]);
    }

    #[test]
    fn an_identical_permanent_looking_error_stops_at_its_second_occurrence() {
        let s500 = |body: &str| GatewayError::Status { status: 500, body: body.into(), retry_after_ms: None, should_retry: None };
        let api = GatewayError::StreamError { kind: "api_error".into(), message: "no key for upstream".into() };
        let stop = Decision::Stop(StopReason::Repeated);
        assert_eq!(run(RetryPolicy::default(), &[(s500("boom"), false), (s500("boom"), false)]).0, vec![retry(500, false), stop]);
        assert_eq!(run(RetryPolicy::default(), &[(api.clone(), false), (api.clone(), true)]).0, vec![retry(500, false), stop]);
        // Different bodies, or an error between them, are not a repeat.
        let (d, _) = run(RetryPolicy::default(), &[(s500("a"), false), (s500("b"), false), (status(503, None), false), (s500("b"), false)]);
        assert!(d.iter().all(|d| matches!(d, Decision::Retry { .. })), "{d:?}");
        // "Busy" answers repeat while they last.
        for e in [status(503, None), status(529, None), GatewayError::StreamError { kind: "overloaded_error".into(), message: "m".into() }]
        {
            let (d, _) = run(RetryPolicy::default(), &[(e.clone(), false), (e.clone(), false), (e, false)]);
            assert!(d.iter().all(|d| matches!(d, Decision::Retry { .. })), "{d:?}");
        }
        assert!(!repeat_is_final(&GatewayError::Status { status: 500, body: String::new(), retry_after_ms: Some(1), should_retry: None }));
    }

    #[test]
    fn a_gateway_silent_for_the_idle_timeout_twice_stops_the_round() {
        let silent = GatewayError::Timeout(300);
        let (d, _) = run(RetryPolicy::default(), &[(silent.clone(), false), (silent, false)]);
        assert_eq!(d, vec![retry(500, false), Decision::Stop(StopReason::Repeated)]);
    }

    #[test]
    fn refused_connections_are_retried_for_the_connect_budget_only() {
        let refused = GatewayError::Connect { url: "u".into(), message: "connection refused".into() };
        let errs: Vec<_> = (0..7).map(|_| (refused.clone(), false)).collect();
        let (d, b) = run(RetryPolicy::default(), &errs[..6]);
        // 0.5 + 1 + 2 + 4 s, then the last wait is cut to the 2.5 s left of the 10 s.
        assert_eq!(
            d,
            vec![
                retry(500, false),
                retry(1000, false),
                retry(2000, false),
                retry(4000, false),
                retry(2500, false),
                Decision::Stop(StopReason::ConnectBudgetSpent)
            ]
        );
        assert_eq!(b.attempts(), 6);
        // Without a budget (a resident server) they outlast the attempt budget, at the backoff ceiling.
        let p = RetryPolicy { max_retries: 2, connect_retry_budget: None, ..RetryPolicy::default() };
        let (d, _) = run(p, &errs);
        assert_eq!(d.len(), 7);
        assert_eq!(d[6], retry(8000, false));
        // An answer in between starts a new run of connection failures.
        let p = RetryPolicy { connect_retry_budget: Some(ms(600)), ..RetryPolicy::default() };
        let (d, _) = run(p, &[(refused.clone(), false), (refused.clone(), false), (status(503, None), false), (refused, false)]);
        assert_eq!(d, vec![retry(500, false), retry(100, false), retry(2000, false), retry(600, false)]);
    }

    #[test]
    fn parse_headers() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("2", now), Some(ms(2000)));
        assert_eq!(parse_retry_after(" 1.5 ", now), Some(ms(1500)));
        // 1_700_000_000 is Tue, 14 Nov 2023 22:13:20 GMT.
        assert_eq!(parse_retry_after("Tue, 14 Nov 2023 22:13:30 GMT", now), Some(ms(10_000)));
        assert_eq!(parse_retry_after("Tue, 14 Nov 2023 22:13:00 GMT", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
        assert_eq!(parse_retry_after_ms("250"), Some(ms(250)));
        assert_eq!(parse_retry_after_ms("x"), None);
        assert_eq!(parse_should_retry("TRUE"), Some(true));
        assert_eq!(parse_should_retry("false"), Some(false));
        assert_eq!(parse_should_retry("maybe"), None);
    }
}
