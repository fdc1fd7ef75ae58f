//! A real headless browser for the dashboard's tests and bench (docs/design.md §14): Debian's
//! `chromedriver` started on 127.0.0.1 (port 0, the port it reports on stdout) and one
//! WebDriver session on `chromium --headless=new` with a throwaway profile. Test fixtures only.
//!
//! Owns the two processes: [`Browser::close`] ends the session (chromium quits) and stops
//! chromedriver; dropping a [`Browser`] that was not closed (a failing test) kills chromium's
//! and chromedriver's processes by pid, so no test leaves a browser behind.
//!
//! Every wait is bounded ([`WAIT`]) and fails with what it waited for and what the page shows.
//! The polling runs inside the page (one WebDriver call per wait), never as sleeps in the test.
//!
//! `CICY_CHROMEDRIVER` and `CICY_CHROMIUM` override the two binaries; `scripts/test.sh`
//! installs Debian's `chromium` and `chromium-driver` when chromedriver is missing.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The bound of every wait on the page.
pub const WAIT: Duration = Duration::from_secs(20);

/// A laptop window and a phone's (an iPhone 12-15's CSS pixels).
pub const LAPTOP: (u32, u32) = (1280, 800);
pub const PHONE: (u32, u32) = (390, 844);

/// One chromedriver and one session on a headless chromium.
pub struct Browser {
    pub client: Client,
    driver: Option<tokio::process::Child>,
    driver_pid: i32,
    _profile: tempfile::TempDir,
}

/// `CICY_CHROMEDRIVER`, else `chromedriver` on PATH, else Debian's.
fn chromedriver() -> PathBuf {
    let found = match std::env::var_os("CICY_CHROMEDRIVER") {
        Some(p) => PathBuf::from(p),
        None => std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|d| d.join("chromedriver"))
            .find(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("/usr/bin/chromedriver")),
    };
    assert!(
        found.is_file(),
        "chromedriver is missing ({}): the dashboard tests drive a real chromium; scripts/test.sh installs chromium + chromium-driver \
         (or set CICY_CHROMEDRIVER and CICY_CHROMIUM)",
        found.display()
    );
    found
}

fn chromium() -> String {
    std::env::var("CICY_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into())
}

/// `<target>/dashboard-screenshots`: `CARGO_TARGET_DIR`, else the folder above the profile
/// folder (`debug`, `release`) the running binary sits in (`<target>/<profile>/deps/<bin>`).
pub fn screenshot_dir() -> PathBuf {
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t),
        None => {
            let exe = std::env::current_exe().expect("the test binary's path");
            exe.ancestors().nth(3).expect("<target>/<profile>/deps/<binary>").to_path_buf()
        }
    };
    target.join("dashboard-screenshots")
}

impl Browser {
    /// Starts chromedriver and a session with a `width`×`height` window.
    pub async fn start((width, height): (u32, u32)) -> Self {
        let profile = tempfile::tempdir().expect("profile tempdir");
        let mut driver = tokio::process::Command::new(chromedriver())
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn chromedriver");
        let driver_pid = driver.id().expect("chromedriver pid") as i32;
        let stdout = driver.stdout.take().expect("chromedriver stdout");
        // "ChromeDriver was started successfully on port 41347." once it listens.
        let port = tokio::time::timeout(WAIT, async {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(line) = lines.next_line().await.expect("read chromedriver stdout") {
                if let Some(rest) = line.split("started successfully on port ").nth(1) {
                    let port: u16 = rest.trim_end_matches('.').parse().expect("chromedriver's port");
                    // Keep draining its stdout so a chatty driver never blocks on a full pipe.
                    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                    return port;
                }
            }
            panic!("chromedriver exited before it listened");
        })
        .await
        .expect("chromedriver listens within 20 s");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium(),
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage",
                    format!("--user-data-dir={}", profile.path().display()),
                    format!("--window-size={width},{height}"),
                ],
            }),
        );
        let mut builder = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
        builder.capabilities(caps);
        let client = builder
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("a WebDriver session on {} through chromedriver: {e}", chromium()));
        client.set_window_size(width, height).await.expect("window size");
        Self { client, driver: Some(driver), driver_pid, _profile: profile }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap_or_else(|e| panic!("navigate to {url}: {e}"));
    }

    /// Runs `body` (a function body: `return …`) in the page; its JSON value.
    pub async fn js(&self, body: &str) -> Value {
        self.client.execute(body, vec![]).await.unwrap_or_else(|e| panic!("script failed: {e}\n{body}"))
    }

    /// Waits until the JS expression `cond` is truthy in the page (re-evaluated every 20 ms
    /// inside the page, errors counting as false) and returns its value; panics after [`WAIT`]
    /// naming `what`, the expression and the page's visible text.
    pub async fn wait_js(&self, what: &str, cond: &str) -> Value {
        let limit = WAIT.as_millis();
        let script = format!(
            "const done = arguments[arguments.length - 1]; const until = Date.now() + {limit};
             (function tick() {{
                 let v; try {{ v = ({cond}); }} catch (e) {{ v = undefined; }}
                 if (v) return done({{ok: true, v}});
                 if (Date.now() > until) {{
                     const b = document.body;
                     const text = location.href + ' ' + (b ? b.innerText || b.outerHTML : '');
                     return done({{ok: false, text: text.slice(0, 3000)}});
                 }}
                 setTimeout(tick, 20);
             }})();"
        );
        // The WebDriver's own script timeout (30 s by default) stays above the page's bound.
        let out = self.client.execute_async(&script, vec![]).await.unwrap_or_else(|e| panic!("waiting for {what}: {e}"));
        if out["ok"] != true {
            panic!("{what}: not within {WAIT:?}\n  condition: {cond}\n  the page shows:\n{}", out["text"].as_str().unwrap_or(""));
        }
        out["v"].clone()
    }

    /// Waits for an element matching `css` and returns it.
    pub async fn wait_css(&self, css: &str) -> Element {
        let sel = serde_json::to_string(css).expect("selector as JSON");
        self.wait_js(&format!("an element `{css}`"), &format!("document.querySelector({sel})")).await;
        self.find(css).await
    }

    /// Waits for an element matching `css` that is shown (has a layout box).
    pub async fn wait_visible(&self, css: &str) -> Element {
        let sel = serde_json::to_string(css).expect("selector as JSON");
        let cond = format!("(() => {{ const e = document.querySelector({sel}); return e && e.getClientRects().length > 0; }})()");
        self.wait_js(&format!("`{css}` shown"), &cond).await;
        self.find(css).await
    }

    /// Waits until nothing matching `css` is shown.
    pub async fn wait_hidden(&self, css: &str) {
        let sel = serde_json::to_string(css).expect("selector as JSON");
        let cond = format!("[...document.querySelectorAll({sel})].every(e => e.getClientRects().length === 0)");
        self.wait_js(&format!("`{css}` hidden"), &cond).await;
    }

    pub async fn find(&self, css: &str) -> Element {
        self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("find `{css}`: {e}"))
    }

    /// Clicks the element `css` (waiting until it is shown).
    pub async fn click(&self, css: &str) {
        self.wait_visible(css).await.click().await.unwrap_or_else(|e| panic!("click `{css}`: {e}"));
    }

    /// Types `text` into the element `css` (waiting until it is shown), after clearing it.
    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self.wait_visible(css).await;
        e.clear().await.unwrap_or_else(|err| panic!("clear `{css}`: {err}"));
        e.send_keys(text).await.unwrap_or_else(|err| panic!("type into `{css}`: {err}"));
    }

    /// The `textContent` of every element matching `css`, in document order.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let sel = serde_json::to_string(css).expect("selector as JSON");
        let v = self.js(&format!("return [...document.querySelectorAll({sel})].map(e => e.textContent);")).await;
        serde_json::from_value(v).expect("a list of texts")
    }

    /// Attribute `attr` of every element matching `css`, in document order.
    pub async fn attrs(&self, css: &str, attr: &str) -> Vec<String> {
        let sel = serde_json::to_string(css).expect("selector as JSON");
        let attr = serde_json::to_string(attr).expect("attribute as JSON");
        let v = self.js(&format!("return [...document.querySelectorAll({sel})].map(e => e.getAttribute({attr}) || '');")).await;
        serde_json::from_value(v).expect("a list of attributes")
    }

    /// Saves a PNG of the window as `<target>/dashboard-screenshots/<name>.png`; its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("screenshot folder");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write the screenshot");
        path
    }

    /// Ends the session (chromium quits) and stops chromedriver.
    pub async fn close(mut self) {
        let client = self.client.clone();
        let closed = tokio::time::timeout(WAIT, client.close()).await;
        assert!(matches!(closed, Ok(Ok(()))), "the WebDriver session closes: {closed:?}");
        if let Some(mut driver) = self.driver.take() {
            let _ = driver.start_kill();
            let _ = tokio::time::timeout(WAIT, driver.wait()).await;
        }
    }
}

/// Every process below `pid`, read from /proc.
fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut queue = vec![pid];
    while let Some(p) = queue.pop() {
        // Each thread lists the children it forked.
        let tasks = std::fs::read_dir(Path::new("/proc").join(p.to_string()).join("task")).into_iter().flatten().flatten();
        for task in tasks {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for c in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                out.push(c);
                queue.push(c);
            }
        }
    }
    out
}

impl Drop for Browser {
    fn drop(&mut self) {
        if self.driver.is_none() {
            return;
        }
        // Not closed (the test failed first): chromium and its helpers were started by this
        // chromedriver, so they are its descendants; kill them, then the driver, by pid.
        for pid in descendants(self.driver_pid) {
            // SAFETY: kill(2) on a descendant of the chromedriver this fixture started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if let Some(mut driver) = self.driver.take() {
            let _ = driver.start_kill();
        }
    }
}
