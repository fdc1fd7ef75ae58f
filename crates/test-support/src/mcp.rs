//! The MCP server of the tests and benches: `@modelcontextprotocol/server-everything`,
//! installed from npm by `scripts/mcp-test-server.sh`. Test fixtures only.

use std::sync::OnceLock;

/// The server's entry script (run it as `node <entry> stdio`): `CICY_TEST_MCP_SERVER` as
/// scripts/test.sh sets it, else what the install script prints (it installs once).
pub fn server_entry() -> &'static str {
    static ENTRY: OnceLock<String> = OnceLock::new();
    ENTRY.get_or_init(|| {
        if let Ok(path) = std::env::var("CICY_TEST_MCP_SERVER") {
            return path;
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/mcp-test-server.sh");
        let out = std::process::Command::new(script).output().expect("run scripts/mcp-test-server.sh");
        assert!(
            out.status.success(),
            "scripts/mcp-test-server.sh failed (it needs node and npm; scripts/test.sh runs it): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("a UTF-8 path").trim().to_string()
    })
}
