//! A temporary `$CICY_HOME` with a deterministic test role, agents created through the library,
//! and an event collector. Test fixtures only.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cicy::agent::{self, CreateOptions, Session};
use cicy::event::{Emitter, Event, EventKind};
use cicy::gateway::ApiStyle;
use cicy::home::Home;

/// system.md of the `tester` role.
pub const TEST_SYSTEM: &str = "You are a test agent.";
/// AGENTS.md written over the seeded one so request bytes do not depend on temp paths.
pub const TEST_AGENTS_MD: &str = "# Role\n\nYou are Tess, the test agent.\n";

pub struct TestHome {
    pub dir: tempfile::TempDir,
    pub home: Home,
}

impl TestHome {
    /// A home whose config points at `gateway_url` with fast retries off by default
    /// (`max_retries` as given), and a `tester` role with `tools` and `max_tool_rounds`.
    pub fn new(gateway_url: &str, max_retries: u32) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Home::at(dir.path().join("home"));
        home.ensure().expect("home");
        std::fs::write(home.config_path(), format!("gateway:\n  url: {gateway_url}\n  model: test-model\n  max_retries: {max_retries}\n"))
            .expect("config");
        let t = Self { dir, home };
        t.write_role("tester", "[core]", 200);
        t
    }

    pub fn root(&self) -> &Path {
        self.home.root()
    }

    /// Writes role template `slug` under the home's roles folder.
    pub fn write_role(&self, slug: &str, tools: &str, max_tool_rounds: u32) {
        let d = self.home.roles_dir().join(slug);
        std::fs::create_dir_all(&d).expect("role dir");
        std::fs::write(d.join("system.md"), format!("{TEST_SYSTEM}\n")).expect("system.md");
        std::fs::write(d.join("role.md"), "You are {{TITLE}}.\n").expect("role.md");
        std::fs::write(
            d.join("meta.yaml"),
            format!("name: Tester\ngreeting: hello tester\ntools: {tools}\nmax_tool_rounds: {max_tool_rounds}\nmax_tokens: 512\n"),
        )
        .expect("meta.yaml");
    }

    /// A `planner` role (tool groups `core` and `plan`, meta.yaml `extra` appended) and an agent
    /// of it; returns the agent's id.
    pub fn planner(&self, extra: &str) -> String {
        self.agent_of_role("planner", "[core, plan]", extra)
    }

    /// Role `slug` with `tools` (200 rounds) and meta.yaml `extra` appended, and an agent of it;
    /// returns the agent's id.
    pub fn agent_of_role(&self, slug: &str, tools: &str, extra: &str) -> String {
        self.write_role(slug, tools, 200);
        let meta = self.home.roles_dir().join(slug).join("meta.yaml");
        let text = std::fs::read_to_string(&meta).expect("meta.yaml");
        std::fs::write(&meta, format!("{text}{extra}")).expect("meta.yaml");
        self.create(slug, None)
    }

    /// Creates an agent with `role_template` and the deterministic AGENTS.md; returns its id.
    pub fn create(&self, role_template: &str, api_style: Option<ApiStyle>) -> String {
        self.create_titled(role_template, "Tess", api_style)
    }

    /// [`TestHome::create`] with the agent titled `title`.
    pub fn create_titled(&self, role_template: &str, title: &str, api_style: Option<ApiStyle>) -> String {
        let created = agent::create(
            &self.home,
            CreateOptions {
                title: title.into(),
                role_template: role_template.into(),
                role: "worker".into(),
                model: None,
                master: None,
                workspace: None,
                api_style,
            },
        )
        .expect("create");
        std::fs::write(created.record.workspace.join("AGENTS.md"), TEST_AGENTS_MD).expect("AGENTS.md");
        created.record.id
    }

    pub fn workspace(&self, id: &str) -> PathBuf {
        self.home.default_workspace(id)
    }

    /// The workspace of every registered agent.
    pub fn workspaces(&self) -> Vec<PathBuf> {
        let reg = cicy::registry::Registry::open(&self.home.db_path()).expect("registry");
        reg.list().expect("agents").into_iter().map(|a| a.workspace).collect()
    }

    pub fn open(&self, id: &str) -> Session {
        Session::open(&self.home, id).expect("open session")
    }

    /// The active conversation's current.json, parsed.
    pub fn current_json(&self, id: &str) -> serde_json::Value {
        let p = self.workspace(id).join(".cicy/history/current.json");
        serde_json::from_slice(&std::fs::read(&p).expect("read current.json")).expect("current.json parses")
    }

    pub fn reply_json(&self, id: &str) -> serde_json::Value {
        let p = self.workspace(id).join(".cicy/history/reply.json");
        serde_json::from_slice(&std::fs::read(&p).expect("read reply.json")).expect("reply.json parses")
    }
}

/// An emitter that keeps every event.
pub fn collector(id: &str) -> (Emitter, Arc<Mutex<Vec<Event>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let e = events.clone();
    (Emitter::new(id, move |ev| e.lock().expect("events").push(ev.clone())), events)
}

/// [`collector`] that also shows each event's kind to `hook` as it is emitted, so a test can act
/// on an event (e.g. cancel at the first delta) instead of polling the list.
pub fn collector_with(id: &str, hook: impl Fn(&EventKind) + Send + Sync + 'static) -> (Emitter, Arc<Mutex<Vec<Event>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let e = events.clone();
    let emitter = Emitter::new(id, move |ev| {
        e.lock().expect("events").push(ev.clone());
        hook(&ev.kind);
    });
    (emitter, events)
}

/// The kinds of the collected events, in order.
pub fn kinds(events: &Arc<Mutex<Vec<Event>>>) -> Vec<EventKind> {
    events.lock().expect("events").iter().map(|e| e.kind.clone()).collect()
}

/// Body bytes up to where the last message-level cache breakpoint starts: what the next
/// request must repeat byte for byte for the gateway's prefix cache to hit.
pub fn cached_prefix(body: &[u8]) -> &[u8] {
    let marker = br#","cache_control":{"type":"ephemeral"}"#;
    let at = body.windows(marker.len()).rposition(|w| w == marker).expect("a cache breakpoint");
    &body[..at]
}
