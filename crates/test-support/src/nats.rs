//! Real `nats-server`s with JetStream for the cluster tests: one, or three routed into one
//! JetStream cluster (for R3), each on 127.0.0.1 at a client port it picks (`-p -1`, read back
//! from its ports file), its store in a temporary folder, killed by pid when dropped. The binary is `CICY_NATS_SERVER` (`CICY_NATS_SERVER_OLD` for the too-old one), else
//! what `scripts/nats-server.sh` installs and prints.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which server to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// The pinned server cluster mode needs.
    Current,
    /// A server too old for cluster mode (2.10).
    Old,
}

/// A running `nats-server`.
pub struct NatsServer {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts `which` and waits until it listens.
    pub fn start(which: Server) -> NatsServer {
        Self::spawn(&binary(which), &[], None)
    }

    /// Starts `bin` with `extra` flags and, when given, a config file of `config`'s text.
    fn spawn(bin: &Path, extra: &[String], config: Option<String>) -> NatsServer {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let mut command = Command::new(bin);
        if let Some(text) = config {
            let file = dir.path().join("nats.conf");
            std::fs::write(&file, text).unwrap();
            command.arg("-c").arg(file);
        }
        let child = command
            .args(["-js", "-a", "127.0.0.1", "-p", "-1"])
            .args(extra)
            .arg("-sd")
            .arg(&store)
            .arg("--ports_file_dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let ports = dir.path().join(format!("nats-server_{}.ports", child.id()));
        let url = read_url(&ports, Duration::from_secs(20));
        NatsServer { child, url, _dir: dir }
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// Three servers routed into one JetStream cluster named `cicy` (servers `s1`..`s3`).
pub struct NatsCluster {
    pub servers: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts the three servers; JetStream elects its meta leader shortly after (a caller
    /// retries its first bucket or stream until then).
    pub fn start() -> NatsCluster {
        Self::start_with(false)
    }

    /// [`NatsCluster::start`] with the documented durable setting, `sync_interval: always`
    /// (every acknowledged write fsynced), given in a config file as a real deployment does.
    pub fn durable() -> NatsCluster {
        Self::start_with(true)
    }

    fn start_with(sync_always: bool) -> NatsCluster {
        let bin = binary(Server::Current);
        // The route ports must be known before any server starts (each lists all three); a
        // port freed here could be taken before its server binds it, which fails the start.
        let routes: Vec<u16> = (0..3).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()).collect();
        let route_list = routes.iter().map(|p| format!("nats://127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
        let servers = routes
            .iter()
            .enumerate()
            .map(|(i, port)| {
                let extra = [
                    "-n".to_string(),
                    format!("s{}", i + 1),
                    "--cluster_name".into(),
                    "cicy".into(),
                    "--cluster".into(),
                    format!("nats://127.0.0.1:{port}"),
                    "--routes".into(),
                    route_list.clone(),
                ];
                // The command line names the store (-sd) and the rest; the file adds what only a
                // config file can say.
                let config = sync_always.then(|| "jetstream { sync_interval: always }\n".to_string());
                NatsServer::spawn(&bin, &extra, config)
            })
            .collect();
        NatsCluster { servers }
    }

    /// Every server's client URL, comma-separated (as `--cluster` takes them).
    pub fn urls(&self) -> String {
        self.servers.iter().map(|s| s.url.as_str()).collect::<Vec<_>>().join(",")
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        // SIGKILL by pid, this fixture's own child only: a test drops a server to kill -9 it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary(which: Server) -> PathBuf {
    let (var, arg) = match which {
        Server::Current => ("CICY_NATS_SERVER", None),
        Server::Old => ("CICY_NATS_SERVER_OLD", Some("old")),
    };
    if let Some(bin) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return PathBuf::from(bin);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/nats-server.sh");
    let out = Command::new("bash").arg(&script).args(arg).stderr(Stdio::inherit()).output().unwrap();
    assert!(out.status.success(), "{} failed: the cluster tests need nats-server (set {var} to one)", script.display());
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The client URL from the server's ports file (`{"nats":["nats://127.0.0.1:PORT"], …}`).
fn read_url(ports: &Path, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(text) = std::fs::read_to_string(ports) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                if let Some(url) = v["nats"][0].as_str() {
                    return url.to_string();
                }
            }
        }
        assert!(Instant::now() < deadline, "nats-server wrote no ports file {} within {within:?}", ports.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}
