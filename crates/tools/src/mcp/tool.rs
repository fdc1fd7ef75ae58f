//! One MCP tool as a [`Tool`] of the turn's `ToolSet`, and the wording of its results.
//!
//! Owns turning a `tools/call` result into the `tool_result` text ([`result_output`]): text
//! content joined with newlines, other content described in one bracketed line, `isError` as
//! an error result, capped like `shell` output. The call itself goes through the [`Pool`].

use futures_util::future::BoxFuture;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

use super::pool::Pool;
use crate::output::cap_output;
use crate::shell::OUTPUT_CAP_BYTES;
use crate::{Tool, ToolContext, ToolOutput};

/// The text of a result that has no content at all.
pub const EMPTY_RESULT: &str = "(no content)";

/// A tool of server `server` offered to the model as `mcp__<server>__<tool>`.
#[derive(Debug)]
pub struct McpTool {
    pub(super) pool: Pool,
    pub(super) server: String,
    /// The name the server knows it by.
    pub(super) tool: String,
    pub(super) full_name: String,
    pub(super) description: String,
    /// The server's `inputSchema`, its key order as the server sent it.
    pub(super) input_schema: serde_json::Value,
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.full_name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> serde_json::Value {
        self.input_schema.clone()
    }

    fn run<'a>(&'a self, input: &'a serde_json::Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let args = match input {
                serde_json::Value::Object(map) => map.clone(),
                other => return ToolOutput::error(format!("error: the input of `{}` must be a JSON object, got {other}", self.full_name)),
            };
            self.pool.call(&self.server, &self.tool, args, &ctx.cancel).await
        })
    }
}

/// The `tool_result` of a `tools/call` result: each text content as it is, other content as a
/// line such as `[image: image/png, 129 bytes]`, joined with `\n`; only `structuredContent`
/// (no content) → its JSON; nothing → [`EMPTY_RESULT`]. `isError: true` makes it an error
/// result. At most [`OUTPUT_CAP_BYTES`] bytes (head and tail kept, as `shell`).
pub fn result_output(result: &CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = result.content.iter().map(describe).collect();
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    let text = if parts.is_empty() { EMPTY_RESULT.to_string() } else { cap_output(&parts.join("\n"), OUTPUT_CAP_BYTES) };
    ToolOutput { content: text, is_error: result.is_error == Some(true) }
}

/// One content block as text: the text itself, or a description of what is not text.
fn describe(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => format!("[image: {}, {} bytes]", i.mime_type, base64_len(&i.data)),
        ContentBlock::Audio(a) => format!("[audio: {}, {} bytes]", a.mime_type, base64_len(&a.data)),
        ContentBlock::Resource(r) => match &r.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => format!("[resource: {uri}]\n{text}"),
            ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => {
                format!("[resource: {uri}, {}, {} bytes]", mime_type.as_deref().unwrap_or("unknown type"), base64_len(blob))
            }
            // rmcp's enums are non_exhaustive: a kind added later is named, not dropped.
            _ => other_kind(block),
        },
        ContentBlock::ResourceLink(link) => match &link.description {
            Some(d) => format!("[resource link: {} ({}): {d}]", link.uri, link.name),
            None => format!("[resource link: {} ({})]", link.uri, link.name),
        },
        _ => other_kind(block),
    }
}

/// `[<type> content]` for a content kind this version does not describe.
fn other_kind(block: &ContentBlock) -> String {
    let kind = serde_json::to_value(block).ok().and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned));
    format!("[{} content]", kind.as_deref().unwrap_or("unknown"))
}

/// The number of bytes base64 text `data` decodes to (RFC 4648: 4 characters → 3 bytes, less
/// one per `=`), without decoding it; whitespace is not counted.
fn base64_len(data: &str) -> usize {
    let chars = data.bytes().filter(|b| !b.is_ascii_whitespace()).count();
    let padding = data.bytes().rev().filter(|b| !b.is_ascii_whitespace()).take(2).take_while(|&b| b == b'=').count();
    (chars / 4 * 3 + (chars % 4).saturating_sub(1)).saturating_sub(padding)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ImageContent, TextContent};

    fn result(content: Vec<ContentBlock>, is_error: Option<bool>) -> CallToolResult {
        let mut r = CallToolResult::success(content);
        r.is_error = is_error;
        r
    }

    #[test]
    fn text_is_joined_and_the_rest_described() {
        let r = result(
            vec![
                ContentBlock::Text(TextContent::new("one")),
                ContentBlock::Image(ImageContent::new("aGVsbG8=", "image/png")),
                ContentBlock::Text(TextContent::new("two")),
            ],
            None,
        );
        assert_eq!(result_output(&r), ToolOutput::ok("one\n[image: image/png, 5 bytes]\ntwo"));
        assert_eq!(result_output(&result(vec![ContentBlock::Text(TextContent::new("bad"))], Some(true))), ToolOutput::error("bad"));
        assert_eq!(result_output(&result(Vec::new(), Some(false))), ToolOutput::ok(EMPTY_RESULT));
        let mut structured = result(Vec::new(), None);
        structured.structured_content = Some(serde_json::json!({"a": 1}));
        assert_eq!(result_output(&structured), ToolOutput::ok(r#"{"a":1}"#));
        let long = result(vec![ContentBlock::Text(TextContent::new("x".repeat(OUTPUT_CAP_BYTES + 1)))], None);
        assert_eq!(result_output(&long).content, cap_output(&"x".repeat(OUTPUT_CAP_BYTES + 1), OUTPUT_CAP_BYTES));
    }

    #[test]
    fn base64_lengths() {
        for (text, n) in [("", 0), ("aA==", 1), ("aGk=", 2), ("aGVs", 3), ("aGVsbG8=", 5), ("aGVs\nbG8=", 5), ("aGVsbA", 4)] {
            assert_eq!(base64_len(text), n, "{text:?}");
        }
    }
}
