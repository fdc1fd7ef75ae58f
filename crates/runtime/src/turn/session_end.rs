//! The `session_end` hook point: run here, beside the turn loop, because its tools are a
//! turn's ([`super::tool_context`]); `crate::hooks` itself takes plain values and knows no
//! session.

use tokio_util::sync::CancellationToken;

use crate::agent::Session;
use crate::event::Emitter;
use crate::hooks::{Hooks, TurnIds};

/// `session_end`: the conversation of `session` ends (`/clear`, before the new one starts), with
/// `reason` `clear` and its `message_count`; `turn_id` is empty and `round` 0. Nothing a hook
/// answers changes that (only `allow` is allowed). A role that cannot be read runs no hook (the
/// clear reports nothing of it; the next turn does).
pub async fn session_end(session: &Session, events: &Emitter, cancel: &CancellationToken) {
    let Ok(m) = session.materials() else { return };
    let ids = TurnIds {
        agent_id: &session.agent().record.id,
        conv_id: &session.conversation().current.conversation_id,
        turn_id: "",
        workspace: &session.agent().record.workspace,
    };
    let role_dir = session.agent().home.roles_dir().join(&m.template.slug);
    let hooks = Hooks::new(&m.template.meta.hooks, role_dir, || super::tool_context(session, &m, cancel, events), events, ids);
    hooks.session_end(session.conversation().current.messages.len()).await;
}
