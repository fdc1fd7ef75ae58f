//! The workspace index of `agent_config`: column `real_path` (unique index `agent_real_path`)
//! holds each workspace's [`key`], so `create` checks a new workspace against every agent by a
//! few indexed lookups instead of resolving every agent's path (docs/design.md §3).
//!
//! Owns the key, the lookups that refuse shared and nested workspaces, and filling the column
//! for rows written before it existed. Must not touch any other column or table.

use std::path::{Component, Path, PathBuf};

use rusqlite::{params, ErrorCode, OptionalExtension, Transaction};

/// An agent whose workspace the new one collides with: its id and its workspace as stored.
pub(super) type Owner = (String, PathBuf);

/// The workspace with this exact key.
pub(super) const SAME: &str = "SELECT id, workspace FROM agent_config WHERE real_path = ?1";
/// The first agent (in creation order) whose workspace lies strictly below key ?1: keys end
/// in `/`, so they are the keys in [?1, ?1 with its last `/` turned into `0`), `0` being the
/// byte after `/`.
pub(super) const BELOW: &str = "SELECT id, workspace FROM agent_config WHERE real_path > ?1 AND real_path < ?2 ORDER BY n LIMIT 1";

/// `workspace` as the index holds it: the deepest existing ancestor resolved through symlinks,
/// the rest appended with `.` and `..` applied, as bytes ending in `/`. A workspace that does
/// not exist yet gets the key its folder will have once `create` makes it.
pub(super) fn key(workspace: &Path) -> Vec<u8> {
    let mut real = PathBuf::new();
    let mut rest = Vec::new();
    for ancestor in workspace.ancestors() {
        if let Ok(found) = ancestor.canonicalize() {
            real = found;
            break;
        }
        if let Some(name) = ancestor.components().next_back() {
            rest.push(name);
        }
    }
    for part in rest.into_iter().rev() {
        match part {
            Component::ParentDir => {
                real.pop();
            }
            Component::Normal(name) => real.push(name),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    let mut bytes = real.into_os_string().into_encoded_bytes();
    if bytes.last() != Some(&b'/') {
        bytes.push(b'/');
    }
    bytes
}

/// The agent whose workspace has key `key`.
pub(super) fn same(tx: &Transaction<'_>, key: &[u8]) -> rusqlite::Result<Option<Owner>> {
    tx.query_row(SAME, [key], owner).optional()
}

/// Why the workspace of key `key` may not be an agent's because of another agent: it holds one's
/// workspace or lies inside one. The exact same workspace is [`same`]'s.
pub(super) fn nested(tx: &Transaction<'_>, key: &[u8]) -> rusqlite::Result<Option<String>> {
    let mut end = key.to_vec();
    if let Some(last) = end.last_mut() {
        *last = b'0';
    }
    if let Some((id, t)) = tx.query_row(BELOW, params![key, end], owner).optional()? {
        return Ok(Some(format!("holds the workspace of agent {id} ({})", t.display())));
    }
    // Every proper ancestor's key is a prefix of `key` ending at one of its `/`.
    let ancestors = key.iter().enumerate().filter(|&(i, &b)| b == b'/' && i + 1 < key.len());
    for (i, _) in ancestors.collect::<Vec<_>>().into_iter().rev() {
        if let Some((id, t)) = same(tx, &key[..=i])? {
            return Ok(Some(format!("is inside the workspace of agent {id} ({})", t.display())));
        }
    }
    Ok(None)
}

/// Gives every row without a key (written before schema version 7) its key, in creation order.
/// A row whose key an earlier row already has (two agents sharing a folder through a symlink
/// made after their creates) keeps none: the earlier row's key refuses that folder already.
pub(super) fn fill(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    let rows: Vec<Owner> = {
        let mut stmt = tx.prepare("SELECT id, workspace FROM agent_config WHERE real_path IS NULL ORDER BY n")?;
        let rows = stmt.query_map([], owner)?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for (id, workspace) in rows {
        match tx.execute("UPDATE agent_config SET real_path = ?1 WHERE id = ?2", params![key(&workspace), id]) {
            Ok(_) => {}
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
                tracing::warn!(agent = %id, workspace = %workspace.display(), "the workspace is also another agent's");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn owner(r: &rusqlite::Row<'_>) -> rusqlite::Result<Owner> {
    Ok((r.get(0)?, PathBuf::from(r.get::<_, String>(1)?)))
}

#[cfg(test)]
mod tests {
    use super::super::{NewAgent, Registry, MIGRATIONS};
    use super::*;

    fn at(workspace: &Path) -> NewAgent {
        NewAgent {
            title: "x".into(),
            workspace: Some(workspace.to_path_buf()),
            role: "worker".into(),
            role_template: "assistant".into(),
            default_model: None,
            master_id: None,
            config: Default::default(),
        }
    }

    #[test]
    fn a_registry_of_version_5_gets_its_keys_and_refuses_by_them() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        let (a, b) = (real.join("a"), real.join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        std::os::unix::fs::symlink(&b, real.join("to-b")).unwrap();
        std::os::unix::fs::symlink(&a, real.join("to-a")).unwrap();
        let db = real.join("home/cicy.db");
        std::fs::create_dir(real.join("home")).unwrap();
        let old = rusqlite::Connection::open(&db).unwrap();
        for m in &MIGRATIONS[..5] {
            old.execute_batch(m).unwrap();
        }
        // w-3 shares w-1's folder through a symlink made after both were created.
        let row = "INSERT INTO agent_config (id, n, title, workspace, role_template, created_at, updated_at) VALUES";
        old.execute_batch(&format!(
            "PRAGMA user_version = 5;
             {row} ('w-1', 1, 'A', '{}', 'assistant', 't', 't');
             {row} ('w-2', 2, 'B', '{}', 'assistant', 't', 't');
             {row} ('w-3', 3, 'C', '{}', 'assistant', 't', 't');",
            a.display(),
            real.join("to-b").display(),
            real.join("to-a").display()
        ))
        .unwrap();
        drop(old);

        let mut reg = Registry::open(&db).unwrap();
        let keys: Vec<(String, Option<String>)> = {
            let mut stmt = reg.conn.prepare("SELECT id, CAST(real_path AS TEXT) FROM agent_config ORDER BY n").unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
        };
        let r = real.display();
        assert_eq!(keys, [("w-1".into(), Some(format!("{r}/a/"))), ("w-2".into(), Some(format!("{r}/b/"))), ("w-3".into(), None)]);
        let refusal = |reg: &mut Registry, w: PathBuf| reg.create(at(&w), |id| real.join(id)).unwrap_err().to_string();
        assert_eq!(
            refusal(&mut reg, real.join("to-a")),
            format!("{r}/to-a is already the workspace of agent w-1; give this agent its own --workspace")
        );
        assert_eq!(
            refusal(&mut reg, real.join("to-b/sub")),
            format!("{r}/to-b/sub is inside the workspace of agent w-2 ({r}/to-b); give this agent a workspace of its own outside it")
        );
        assert_eq!(
            refusal(&mut reg, real.clone()),
            format!("{r} holds the cicy home {r}/home (its API token, registry, roles and every agent's files); give this agent a workspace of its own outside it")
        );
        std::fs::create_dir(real.join("c")).unwrap();
        let c = reg.create(at(&real.join("c")), |id| real.join(id)).unwrap();
        assert_eq!((c.id.as_str(), c.workspace.clone()), ("w-4", real.join("c")));
        std::fs::create_dir(real.join("d")).unwrap();
        std::fs::create_dir(real.join("d/e")).unwrap();
        reg.create(at(&real.join("d/e")), |id| real.join(id)).unwrap();
        assert_eq!(
            refusal(&mut reg, real.join("d")),
            format!("{r}/d holds the workspace of agent w-5 ({r}/d/e); give this agent a workspace of its own outside it")
        );
        // A sibling whose name starts like an agent's folder is neither inside nor holding it.
        assert_eq!(reg.create(at(&real.join("d-e")), |id| real.join(id)).unwrap().id, "w-6");
    }

    #[test]
    fn the_lookups_search_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::open(&dir.path().join("cicy.db")).unwrap();
        for (sql, args) in [(SAME, vec![b"/a/".to_vec()]), (BELOW, vec![b"/a/".to_vec(), b"/a0".to_vec()])] {
            let plan: Vec<String> = {
                let mut stmt = reg.conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
                let rows = stmt.query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3)).unwrap();
                rows.map(Result::unwrap).collect()
            };
            assert!(plan.iter().any(|line| line.starts_with("SEARCH agent_config USING INDEX agent_real_path")), "{sql}: {plan:?}");
        }
    }

    #[test]
    fn a_key_resolves_what_exists_and_applies_dots_to_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("a")).unwrap();
        std::os::unix::fs::symlink(real.join("a"), real.join("link")).unwrap();
        let k = |p: PathBuf| String::from_utf8(key(&p)).unwrap();
        let r = real.display();
        assert_eq!(k(dir.path().join("link")), format!("{r}/a/"));
        assert_eq!(k(dir.path().join("link/new/./x/../y")), format!("{r}/a/new/y/"));
        assert_eq!(k(dir.path().join("missing/../a")), format!("{r}/a/"));
        assert_eq!(k(PathBuf::from("/")), "/");
    }
}
