//! Runtime configuration: `$CICY_HOME/config.yaml` overridden by environment (docs/design.md §4).
//!
//! Owns the file's schema, the env overrides and the resulting [`Config`]. The API key is read
//! from the environment only and is never written anywhere by the runtime.
//!
//! ```yaml
//! gateway:
//!   url: http://127.0.0.1:8080      # env CICY_GATEWAY_URL
//!   api_style: anthropic             # or openai; env CICY_API_STYLE
//!   api_key_env: CICY_API_KEY        # which env var holds the key; env CICY_API_KEY always wins
//!   model: claude-sonnet-4-5         # env CICY_MODEL
//!   connect_timeout_secs: 10
//!   idle_timeout_secs: 300           # longest silence inside a streaming response
//!   max_retries: 10                  # cicy: 10
//! compaction:                        # docs/design.md §7, automatic compaction before a round
//!   auto: true
//!   max_messages: 300                # cicy: compact when the window has more messages
//!   context_percent: 85              # cicy: … or its estimated tokens exceed this share
//!   keep_recent: 160                 # cicy: messages kept after the summary
//!   hard_cap: 600                    # cicy: never send more messages than this
//!   context_window: 200000           # tokens, for a model whose role meta.yaml names none;
//!                                    # env CICY_CONTEXT_WINDOW
//!   keep_snapshots: 20               # ours: archived current/reply pairs kept, plus the first
//! memory:                            # when buffered turns go to the memory recognizer (§8)
//!   batch_turns: 6                   # cicy: 6 turns
//!   max_wait_secs: 1200              # cicy: the oldest turn waits at most 20 min
//!   idle_secs: 300                   # cicy: 5 min without a new turn
//!   recognizer_timeout_secs: 30      # ours: the whole recognizer call, retries included
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::memory::MemorySettings;
use cicy_protocol::prompt::ApiStyle;

/// Env var names read by [`Config::load`].
pub const ENV_GATEWAY_URL: &str = "CICY_GATEWAY_URL";
pub const ENV_API_STYLE: &str = "CICY_API_STYLE";
pub const ENV_API_KEY: &str = "CICY_API_KEY";
pub const ENV_MODEL: &str = "CICY_MODEL";
/// Overrides `compaction.context_window` (tokens; e.g. `scripts/main-job.sh` sets the n_ctx of
/// the local model it starts).
pub const ENV_CONTEXT_WINDOW: &str = "CICY_CONTEXT_WINDOW";

/// Errors reading the configuration; each names the file or variable at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{source_name}: api_style must be `anthropic` or `openai`, got `{value}`")]
    ApiStyle { source_name: String, value: String },
    #[error("{source_name}: the gateway URL must be an http:// or https:// URL, got `{value}`")]
    GatewayUrl { source_name: String, value: String },
    #[error("{path}: compaction: {message}")]
    Compaction { path: PathBuf, message: String },
    #[error("{name}: the context window must be a whole number of tokens above 0, got `{value}`")]
    ContextWindow { name: String, value: String },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    gateway: FileGateway,
    #[serde(default)]
    compaction: FileCompaction,
    #[serde(default)]
    memory: FileMemory,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCompaction {
    auto: Option<bool>,
    max_messages: Option<usize>,
    context_percent: Option<u8>,
    keep_recent: Option<usize>,
    hard_cap: Option<usize>,
    context_window: Option<u64>,
    keep_snapshots: Option<usize>,
}

/// When and how much automatic compaction summarizes (docs/design.md §7); `compaction:` in
/// config.yaml. Defaults are cicy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionConfig {
    /// Compact automatically before a round (manual `/compact` works either way).
    pub auto: bool,
    /// cicy: 300. Compact when the window holds more messages than this.
    pub max_messages: usize,
    /// cicy: 85. Compact when the window's estimated tokens exceed this percentage of the
    /// model's context window.
    pub context_percent: u8,
    /// cicy: 160. How many recent messages stay in the window after the summary (at most).
    pub keep_recent: usize,
    /// cicy: 600. A window is never sent with more messages than this.
    pub hard_cap: usize,
    /// Tokens; the context window of a model whose role meta.yaml gives none. 200000 is the
    /// context window of the Claude models the Anthropic wire style targets.
    pub context_window: u64,
    /// Ours: 20. Archived `current.<unix>.json` / `reply.<unix>.json` pairs a compaction keeps
    /// per conversation besides the first (the oldest are deleted), so a long turn with many
    /// automatic compactions does not fill the disk with ever larger copies.
    pub keep_snapshots: usize,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            auto: true,
            max_messages: 300,
            context_percent: 85,
            keep_recent: 160,
            hard_cap: 600,
            context_window: 200_000,
            keep_snapshots: 20,
        }
    }
}

impl CompactionConfig {
    fn from_file(f: FileCompaction, path: &Path) -> Result<Self, ConfigError> {
        let d = Self::default();
        let c = Self {
            auto: f.auto.unwrap_or(d.auto),
            max_messages: f.max_messages.unwrap_or(d.max_messages),
            context_percent: f.context_percent.unwrap_or(d.context_percent),
            keep_recent: f.keep_recent.unwrap_or(d.keep_recent),
            hard_cap: f.hard_cap.unwrap_or(d.hard_cap),
            context_window: f.context_window.unwrap_or(d.context_window),
            keep_snapshots: f.keep_snapshots.unwrap_or(d.keep_snapshots),
        };
        let bad = |message: String| Err(ConfigError::Compaction { path: path.to_path_buf(), message });
        if c.context_percent == 0 || c.context_percent > 100 {
            return bad(format!("context_percent must be 1..=100, got {}", c.context_percent));
        }
        if c.keep_recent >= c.max_messages {
            return bad(format!("keep_recent ({}) must be below max_messages ({})", c.keep_recent, c.max_messages));
        }
        if c.max_messages > c.hard_cap {
            return bad(format!("max_messages ({}) must not exceed hard_cap ({})", c.max_messages, c.hard_cap));
        }
        if c.context_window == 0 {
            return bad("context_window must be above 0".to_string());
        }
        Ok(c)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMemory {
    batch_turns: Option<usize>,
    max_wait_secs: Option<u64>,
    idle_secs: Option<u64>,
    recognizer_timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileGateway {
    url: Option<String>,
    api_style: Option<String>,
    api_key_env: Option<String>,
    model: Option<String>,
    connect_timeout_secs: Option<u64>,
    idle_timeout_secs: Option<u64>,
    max_retries: Option<u32>,
}

/// The effective configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Gateway base URL (without `/v1/...`); `None` when neither the file nor env set one.
    pub gateway_url: Option<String>,
    pub api_style: ApiStyle,
    /// The key itself, read from env; never persisted.
    pub api_key: Option<String>,
    /// The env var named by `gateway.api_key_env` (default `CICY_API_KEY`); hidden from tools.
    pub api_key_env: String,
    pub model: Option<String>,
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    /// cicy: 10 retries per request.
    pub max_retries: u32,
    pub compaction: CompactionConfig,
    /// When buffered turns are flushed to the memory recognizer.
    pub memory: MemorySettings,
}

impl Config {
    /// Reads `config_path` if it exists, then applies the `CICY_*` environment variables.
    pub fn load(config_path: &Path) -> Result<Self, ConfigError> {
        Self::load_with_env(config_path, |k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// [`Config::load`] with an injectable environment (tests).
    pub fn load_with_env(config_path: &Path, env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let file = match std::fs::read_to_string(config_path) {
            Ok(text) if text.trim().is_empty() => FileConfig::default(),
            Ok(text) => serde_yaml::from_str::<FileConfig>(&text)
                .map_err(|e| ConfigError::Parse { path: config_path.to_path_buf(), message: e.to_string() })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileConfig::default(),
            Err(source) => return Err(ConfigError::Read { path: config_path.to_path_buf(), source }),
        };
        let mut compaction = CompactionConfig::from_file(file.compaction, config_path)?;
        if let Some(v) = env(ENV_CONTEXT_WINDOW) {
            compaction.context_window = v
                .trim()
                .parse()
                .ok()
                .filter(|w: &u64| *w > 0)
                .ok_or_else(|| ConfigError::ContextWindow { name: ENV_CONTEXT_WINDOW.to_string(), value: v.clone() })?;
        }
        let g = file.gateway;
        let api_style = match (env(ENV_API_STYLE), g.api_style) {
            (Some(v), _) => parse_style(&v, ENV_API_STYLE)?,
            (None, Some(v)) => parse_style(&v, &format!("{} gateway.api_style", config_path.display()))?,
            (None, None) => ApiStyle::default(),
        };
        let key_env = g.api_key_env.unwrap_or_else(|| ENV_API_KEY.to_string());
        let memory = memory_settings(&file.memory).map_err(|message| ConfigError::Parse { path: config_path.to_path_buf(), message })?;
        let gateway_url = match (env(ENV_GATEWAY_URL), g.url) {
            (Some(v), _) => Some(check_url(v, ENV_GATEWAY_URL)?),
            (None, Some(v)) => Some(check_url(v, &format!("{} gateway.url", config_path.display()))?),
            (None, None) => None,
        };
        let timeout = |name: &str, v: Option<u64>, default: u64| match v {
            Some(0) => Err(ConfigError::Parse {
                path: config_path.to_path_buf(),
                message: format!("gateway.{name} must be at least 1 (0 would time out every request)"),
            }),
            other => Ok(Duration::from_secs(other.unwrap_or(default))),
        };
        let connect_timeout = timeout("connect_timeout_secs", g.connect_timeout_secs, 10)?;
        let idle_timeout = timeout("idle_timeout_secs", g.idle_timeout_secs, 300)?;
        Ok(Config {
            gateway_url,
            api_style,
            api_key: env(ENV_API_KEY).or_else(|| env(&key_env)),
            api_key_env: key_env,
            model: env(ENV_MODEL).or(g.model),
            connect_timeout,
            idle_timeout,
            max_retries: g.max_retries.unwrap_or(10),
            compaction,
            memory,
        })
    }
}

/// The `memory:` section over cicy's defaults; every value must be at least 1.
fn memory_settings(m: &FileMemory) -> Result<MemorySettings, String> {
    let d = MemorySettings::default();
    let at_least_one = |name: &str, v: Option<u64>| match v {
        Some(0) => Err(format!("memory.{name} must be at least 1")),
        other => Ok(other),
    };
    let batch = at_least_one("batch_turns", m.batch_turns.map(|v| v as u64))?;
    let max_wait = at_least_one("max_wait_secs", m.max_wait_secs)?;
    let idle = at_least_one("idle_secs", m.idle_secs)?;
    let recognizer_timeout = at_least_one("recognizer_timeout_secs", m.recognizer_timeout_secs)?;
    Ok(MemorySettings {
        batch_turns: batch.map_or(d.batch_turns, |v| v as usize),
        max_wait: max_wait.map_or(d.max_wait, Duration::from_secs),
        idle: idle.map_or(d.idle, Duration::from_secs),
        recognizer_timeout: recognizer_timeout.map_or(d.recognizer_timeout, Duration::from_secs),
    })
}

/// `value` if it is an http(s) URL with a host. Anything else can never work, so it is refused
/// here rather than retried by the gateway client as if the failure were temporary.
fn check_url(value: String, source_name: &str) -> Result<String, ConfigError> {
    match url::Url::parse(&value) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => Ok(value),
        _ => Err(ConfigError::GatewayUrl { source_name: source_name.to_string(), value }),
    }
}

fn parse_style(value: &str, source_name: &str) -> Result<ApiStyle, ConfigError> {
    ApiStyle::parse(value).ok_or_else(|| ConfigError::ApiStyle { source_name: source_name.to_string(), value: value.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn env_overrides_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.yaml");
        std::fs::write(&p, "gateway:\n  url: http://file\n  api_style: openai\n  model: m-file\n  api_key_env: MY_KEY\n").unwrap();
        let c = Config::load_with_env(&p, env_of(&[("MY_KEY", "k1")])).unwrap();
        assert_eq!(c.gateway_url.as_deref(), Some("http://file"));
        assert_eq!(c.api_style, ApiStyle::Openai);
        assert_eq!(c.api_key.as_deref(), Some("k1"));
        assert_eq!(c.model.as_deref(), Some("m-file"));
        let c = Config::load_with_env(
            &p,
            env_of(&[
                ("CICY_GATEWAY_URL", "http://env"),
                ("CICY_API_STYLE", "anthropic"),
                ("CICY_MODEL", "m-env"),
                ("CICY_API_KEY", "k2"),
                ("MY_KEY", "k1"),
            ]),
        )
        .unwrap();
        assert_eq!(c.gateway_url.as_deref(), Some("http://env"));
        assert_eq!(c.api_style, ApiStyle::Anthropic);
        assert_eq!(c.model.as_deref(), Some("m-env"));
        assert_eq!(c.api_key.as_deref(), Some("k2"));
    }

    #[test]
    fn missing_file_gives_defaults() {
        let c = Config::load_with_env(Path::new("/nonexistent/config.yaml"), env_of(&[])).unwrap();
        assert_eq!(c.gateway_url, None);
        assert_eq!(c.api_style, ApiStyle::Anthropic);
        assert_eq!(c.max_retries, 10);
        assert_eq!(
            c.compaction,
            CompactionConfig {
                auto: true,
                max_messages: 300,
                context_percent: 85,
                keep_recent: 160,
                hard_cap: 600,
                context_window: 200_000,
                keep_snapshots: 20
            }
        );
        assert_eq!(c.memory.recognizer_timeout, Duration::from_secs(30));
        assert_eq!(c.memory, MemorySettings::default());
        assert_eq!(c.memory.batch_turns, 6);
        assert_eq!(c.memory.max_wait, Duration::from_secs(1200));
        assert_eq!(c.memory.idle, Duration::from_secs(300));
    }

    #[test]
    fn the_context_window_env_overrides_the_file_and_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.yaml");
        std::fs::write(&p, "compaction:\n  context_window: 32000\n").unwrap();
        let c = Config::load_with_env(&p, env_of(&[(ENV_CONTEXT_WINDOW, "8192")])).unwrap();
        assert_eq!(c.compaction.context_window, 8192);
        let e = Config::load_with_env(&p, env_of(&[(ENV_CONTEXT_WINDOW, "8k")])).unwrap_err().to_string();
        assert_eq!(e, "CICY_CONTEXT_WINDOW: the context window must be a whole number of tokens above 0, got `8k`");
    }

    #[test]
    fn compaction_keys_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.yaml");
        std::fs::write(&p, "compaction:\n  auto: false\n  max_messages: 40\n  keep_recent: 12\n  context_window: 32000\n").unwrap();
        let c = Config::load_with_env(&p, env_of(&[])).unwrap().compaction;
        assert_eq!(
            c,
            CompactionConfig {
                auto: false,
                max_messages: 40,
                context_percent: 85,
                keep_recent: 12,
                hard_cap: 600,
                context_window: 32000,
                keep_snapshots: 20
            }
        );
        for (yaml, wanted) in [
            ("compaction:\n  keep_recent: 300\n", "keep_recent (300) must be below max_messages (300)"),
            ("compaction:\n  max_messages: 700\n", "max_messages (700) must not exceed hard_cap (600)"),
            ("compaction:\n  context_percent: 0\n", "context_percent must be 1..=100, got 0"),
            ("compaction:\n  keep: 3\n", "unknown field `keep`"),
        ] {
            std::fs::write(&p, yaml).unwrap();
            let e = Config::load_with_env(&p, env_of(&[])).unwrap_err().to_string();
            assert!(e.contains("config.yaml") && e.contains(wanted), "{yaml}: {e}");
        }
    }

    #[test]
    fn the_memory_section_sets_the_flush_periods() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.yaml");
        std::fs::write(&p, "memory:\n  batch_turns: 3\n  idle_secs: 1\n").unwrap();
        let c = Config::load_with_env(&p, env_of(&[])).unwrap();
        assert_eq!(
            c.memory,
            MemorySettings {
                batch_turns: 3,
                max_wait: Duration::from_secs(1200),
                idle: Duration::from_secs(1),
                recognizer_timeout: Duration::from_secs(30)
            }
        );
        std::fs::write(&p, "memory:\n  recognizer_timeout_secs: 7\ncompaction:\n  keep_snapshots: 3\n").unwrap();
        let c = Config::load_with_env(&p, env_of(&[])).unwrap();
        assert_eq!((c.memory.recognizer_timeout, c.compaction.keep_snapshots), (Duration::from_secs(7), 3));
        std::fs::write(&p, "memory:\n  recognizer_timeout_secs: 0\n").unwrap();
        let e = Config::load_with_env(&p, env_of(&[])).unwrap_err().to_string();
        assert!(e.contains("memory.recognizer_timeout_secs must be at least 1"), "{e}");
        std::fs::write(&p, "memory:\n  idle_secs: 0\n").unwrap();
        let e = Config::load_with_env(&p, env_of(&[])).unwrap_err().to_string();
        assert!(e.contains("config.yaml") && e.contains("memory.idle_secs must be at least 1"), "{e}");
        std::fs::write(&p, "memory:\n  idle: 5\n").unwrap();
        let e = Config::load_with_env(&p, env_of(&[])).unwrap_err().to_string();
        assert!(e.contains("idle"), "{e}");
    }

    #[test]
    fn a_url_that_is_not_http_and_a_zero_timeout_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.yaml");
        for url in ["ftp://example.com", "garbage", "http://"] {
            std::fs::write(&p, format!("gateway:\n  url: {url}\n")).unwrap();
            let e = Config::load_with_env(&p, env_of(&[])).unwrap_err().to_string();
            assert_eq!(e, format!("{} gateway.url: the gateway URL must be an http:// or https:// URL, got `{url}`", p.display()));
        }
        std::fs::write(&p, "").unwrap();
        let e = Config::load_with_env(&p, env_of(&[("CICY_GATEWAY_URL", "ftp://x")])).unwrap_err().to_string();
        assert!(e.starts_with("CICY_GATEWAY_URL: ") && e.contains("`ftp://x`"), "{e}");
        let c = Config::load_with_env(&p, env_of(&[("CICY_GATEWAY_URL", "https://gw.example/base")])).unwrap();
        assert_eq!(c.gateway_url.as_deref(), Some("https://gw.example/base"));
        for key in ["connect_timeout_secs", "idle_timeout_secs"] {
            std::fs::write(&p, format!("gateway:\n  {key}: 0\n")).unwrap();
            let e = Config::load_with_env(&p, env_of(&[])).unwrap_err().to_string();
            assert!(e.contains("config.yaml") && e.contains(&format!("gateway.{key} must be at least 1")), "{e}");
        }
    }

    #[test]
    fn bad_values_name_the_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.yaml");
        std::fs::write(&p, "gateway:\n  api_style: grpc\n").unwrap();
        let e = Config::load_with_env(&p, env_of(&[])).unwrap_err().to_string();
        assert!(e.contains("config.yaml gateway.api_style") && e.contains("grpc"), "{e}");
        std::fs::write(&p, "gateway:\n  urll: x\n").unwrap();
        let e = Config::load_with_env(&p, env_of(&[])).unwrap_err().to_string();
        assert!(e.contains("config.yaml") && e.contains("urll"), "{e}");
        std::fs::write(&p, "").unwrap();
        let e = Config::load_with_env(&p, env_of(&[("CICY_API_STYLE", "x")])).unwrap_err().to_string();
        assert!(e.contains("CICY_API_STYLE"), "{e}");
    }
}
