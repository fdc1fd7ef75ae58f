//! The one retry layer's decisions: which failures are retried and how long to wait.
//!
//! Owns: pure functions over a [`GatewayError`] and header values. Must not touch: sockets,
//! clocks other than a passed-in `now`, random numbers other than a passed-in jitter source,
//! or events — `client.rs` does the waiting, the cancelling and the reporting.
//!
//! Numbers *(cicy, DESIGN.md §4)*: up to 10 retries per request, only before any content has
//! streamed; `retry-after` is a floor capped at 60 s; otherwise `min(0.5·2^n, 8)` s × jitter in
//! [0.75, 1] with n = 0 for the first retry.

use std::time::{Duration, SystemTime};

use super::GatewayError;

/// Retry numbers. [`Default`] gives cicy's: 10 retries, 0.5 s base, 8 s ceiling, 60 s cap on
/// `retry-after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (cicy: 10).
    pub max_retries: u32,
    /// Backoff of the first retry before jitter (cicy: 0.5 s). Tests make it tiny.
    pub base_delay: Duration,
    /// Ceiling of the exponential backoff before jitter (cicy: 8 s).
    pub max_delay: Duration,
    /// Ceiling applied to a server's `retry-after` (cicy: 60 s).
    pub retry_after_cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 10,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            retry_after_cap: Duration::from_secs(60),
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

    /// Whether a failed attempt is retried: the error is retryable ([`classify`]), nothing has
    /// streamed yet, and fewer than `max_retries` retries were done.
    pub fn should_retry(&self, err: &GatewayError, content_started: bool, retries_done: u32) -> bool {
        !content_started && retries_done < self.max_retries && classify(err)
    }
}

/// Is this failure worth another attempt (before any content streamed)?
///
/// Retryable: connection errors ([`GatewayError::Connect`]); HTTP 408, 409, 429 and every 5xx
/// (529 "overloaded" included) unless the server's `x-should-retry` said otherwise — and any
/// status when it said `true`; in-stream `overloaded_error` and `api_error`; a stream that ended
/// or went silent ([`GatewayError::Incomplete`], [`GatewayError::Timeout`] from the idle timer)
/// — the caller retries those only when no content came, which makes them connection failures.
/// Not retryable: other statuses, other stream errors, decode errors, cancel.
pub fn classify(err: &GatewayError) -> bool {
    match err {
        GatewayError::Connect { .. } | GatewayError::Incomplete(_) | GatewayError::Timeout(_) => true,
        GatewayError::Status { status, should_retry, .. } => should_retry.unwrap_or_else(|| status_retryable(*status)),
        GatewayError::StreamError { kind, .. } => matches!(kind.as_str(), "overloaded_error" | "api_error"),
        GatewayError::Decode(_) | GatewayError::Cancelled => false,
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

    #[test]
    fn should_retry_counts_and_content() {
        let p = RetryPolicy { max_retries: 2, ..RetryPolicy::default() };
        let e = status(529, None);
        assert!(p.should_retry(&e, false, 0));
        assert!(p.should_retry(&e, false, 1));
        assert!(!p.should_retry(&e, false, 2));
        assert!(!p.should_retry(&e, true, 0));
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
