//! The connection to the NATS servers of a cluster and the check that they can carry it: a
//! server of at least [`MIN_SERVER`], with JetStream, that keeps a stream's message-schedule
//! setting (an older server drops the field it does not know, and a todo's wake would never
//! fire).

use std::fmt;
use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};

/// Cluster mode needs 2.14: scheduled messages with cron and time zones (`@at` came in 2.12).
pub const MIN_SERVER: Version = Version { major: 2, minor: 14, patch: 0 };

/// **[chosen]** How long connecting may take before the error names the servers.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A server version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    /// Reads `2.15.1`, `v2.15.1` or `2.14.0-RC.1` (a pre-release counts as its release).
    pub fn parse(text: &str) -> Option<Version> {
        let core = text.trim().trim_start_matches('v');
        let core = core.split(['-', '+']).next()?;
        let mut parts = core.split('.').map(|p| p.parse::<u32>().ok());
        let version = Version { major: parts.next()??, minor: parts.next()??, patch: parts.next().unwrap_or(Some(0))? };
        parts.next().is_none().then_some(version)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// What stops cluster mode from running on a server; each names the server and what to do.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("bad cluster URL {url:?}: {reason} (expected nats://HOST:PORT, several separated by commas)")]
    BadUrl { url: String, reason: String },
    #[error("cannot connect to the NATS server at {urls}: {reason}")]
    Connect { urls: String, reason: String },
    #[error(
        "the NATS server at {url} is version {found}; cluster mode needs {MIN_SERVER} or newer (older servers never fire \
         scheduled messages, so todos would not wake): install one with scripts/nats-server.sh"
    )]
    TooOld { url: String, found: String },
    #[error("the NATS server at {url} has no JetStream ({reason}): start it with -js, or `jetstream {{ ... }}` in its config file")]
    NoJetStream { url: String, reason: String },
    #[error(
        "the NATS server at {url} took a stream with message schedules but did not keep the setting: it would never fire \
         a todo's wake; use nats-server {MIN_SERVER} or newer"
    )]
    NoSchedules { url: String },
    #[error("JetStream at {url}: {what}: {reason}")]
    JetStream { url: String, what: String, reason: String },
}

impl EngineError {
    /// A JetStream call to the servers `url` that failed while doing `what`.
    pub(crate) fn jetstream(url: &str, what: impl Into<String>, reason: impl fmt::Display) -> EngineError {
        EngineError::JetStream { url: url.to_string(), what: what.into(), reason: reason.to_string() }
    }
}

/// The servers of a `--cluster` list (`nats://HOST:PORT`, separated by commas).
pub fn split_urls(urls: &str) -> Result<Vec<String>, EngineError> {
    let list: Vec<String> = urls.split(',').map(str::trim).filter(|u| !u.is_empty()).map(str::to_string).collect();
    if list.is_empty() {
        return Err(EngineError::BadUrl { url: redact(urls), reason: "no server named".into() });
    }
    Ok(list)
}

/// `url` with the user and password it may carry replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    match rest.split_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}"),
        None => url.to_string(),
    }
}

/// What [`Engine::check`] found on a server that passed (so it has JetStream and keeps message
/// schedules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerReport {
    /// The server the connection reached.
    pub url: String,
    pub server_name: String,
    pub version: Version,
}

/// A connection to a cluster's NATS servers with its JetStream context.
#[derive(Debug, Clone)]
pub struct Engine {
    client: async_nats::Client,
    jetstream: jetstream::Context,
    urls: String,
}

impl Engine {
    /// Connects to `urls` (`nats://HOST:PORT`, several separated by commas; the client fails
    /// over between them). Does not check the server: see [`Engine::check`].
    pub async fn connect(urls: &str) -> Result<Engine, EngineError> {
        let list = split_urls(urls)?;
        let mut addrs = Vec::with_capacity(list.len());
        for url in &list {
            let addr =
                url.parse::<async_nats::ServerAddr>().map_err(|e| EngineError::BadUrl { url: redact(url), reason: e.to_string() })?;
            addrs.push(addr);
        }
        let shown = list.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",");
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(CONNECT_TIMEOUT)
            .name("cicy")
            .connect(addrs)
            .await
            .map_err(|e| EngineError::Connect { urls: shown.clone(), reason: e.to_string() })?;
        let jetstream = jetstream::new(client.clone());
        Ok(Engine { client, jetstream, urls: shown })
    }

    /// The servers this engine was given, as one comma-separated list.
    pub fn urls(&self) -> &str {
        &self.urls
    }

    /// The JetStream context the buckets and streams of the cluster live in.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// Opens bucket `name` on `replicas` servers, whose entries expire `ttl` after their last
    /// write, leaving a delete marker (for one `ttl`) so a watcher sees the expiry.
    pub(crate) async fn bucket(&self, name: &str, ttl: Duration, replicas: usize) -> Result<kv::Store, EngineError> {
        let config = kv::Config {
            bucket: name.to_string(),
            history: 1,
            max_age: ttl,
            limit_markers: Some(ttl),
            num_replicas: replicas,
            ..Default::default()
        };
        self.jetstream.create_key_value(config).await.map_err(|e| {
            EngineError::jetstream(&self.urls, format!("opening the bucket {name} (entries living {} ms)", ttl.as_millis()), e)
        })
    }

    /// The URL of the server the connection is on now.
    fn server_url(&self) -> String {
        let info = self.client.server_info();
        format!("nats://{}:{}", info.host, info.port)
    }

    /// Refuses a server cluster mode cannot run on: older than [`MIN_SERVER`], without
    /// JetStream, or one that drops a stream's message-schedule setting (checked on a probe
    /// stream in memory, deleted again).
    pub async fn check(&self) -> Result<ServerReport, EngineError> {
        let info = self.client.server_info();
        let url = self.server_url();
        let version = Version::parse(&info.version)
            .filter(|v| *v >= MIN_SERVER)
            .ok_or_else(|| EngineError::TooOld { url: url.clone(), found: info.version.clone() })?;
        self.jetstream.query_account().await.map_err(|e| EngineError::NoJetStream { url: url.clone(), reason: e.to_string() })?;
        if !self.probe_schedules(&url).await? {
            return Err(EngineError::NoSchedules { url });
        }
        Ok(ServerReport { url, server_name: info.server_name.clone(), version })
    }

    /// Creates a probe stream asking for message schedules and reads back whether the server
    /// kept the setting, then deletes the stream.
    async fn probe_schedules(&self, url: &str) -> Result<bool, EngineError> {
        // Unique per process and moment, so two nodes checking at once do not share a probe.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = format!("CICY_PROBE_{}_{nanos}", std::process::id());
        let config = stream::Config {
            name: name.clone(),
            subjects: vec![format!("cicy.probe.{name}")],
            storage: stream::StorageType::Memory,
            max_age: Duration::from_secs(60),
            allow_message_schedules: true,
            ..Default::default()
        };
        let js_err = |what: &str, e: &dyn fmt::Display| EngineError::jetstream(url, what, e);
        let mut created = self.jetstream.create_stream(config).await.map_err(|e| js_err("creating the probe stream", &e))?;
        let kept = created.info().await.map(|i| i.config.allow_message_schedules).map_err(|e| js_err("reading the probe stream", &e));
        let deleted = self.jetstream.delete_stream(&name).await.map_err(|e| js_err("deleting the probe stream", &e));
        let kept = kept?;
        deleted?;
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_servers_print_them() {
        assert_eq!(Version::parse("2.15.1"), Some(Version { major: 2, minor: 15, patch: 1 }));
        assert_eq!(Version::parse("v2.10.26"), Some(Version { major: 2, minor: 10, patch: 26 }));
        assert_eq!(Version::parse("2.14.0-RC.1"), Some(Version { major: 2, minor: 14, patch: 0 }));
        assert_eq!(Version::parse("2.14"), Some(Version { major: 2, minor: 14, patch: 0 }));
        assert_eq!(Version::parse("two"), None);
        assert_eq!(Version::parse("2.14.0.1"), None);
        assert!(Version::parse("2.9.10").unwrap() < MIN_SERVER);
        assert!(Version::parse("2.14.0").unwrap() >= MIN_SERVER);
        assert_eq!(MIN_SERVER.to_string(), "2.14.0");
    }

    #[test]
    fn credentials_never_reach_a_message() {
        assert_eq!(redact("nats://u:p@127.0.0.1:4222"), "nats://***@127.0.0.1:4222");
        assert_eq!(redact("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(split_urls(" a , ,b ").unwrap(), ["a", "b"]);
        assert_eq!(
            split_urls(" , ").unwrap_err().to_string(),
            "bad cluster URL \" , \": no server named (expected nats://HOST:PORT, several separated by commas)"
        );
    }
}
