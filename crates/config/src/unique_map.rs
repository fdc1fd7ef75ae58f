//! A map of meta.yaml whose keys must be unique (`hooks:`, `mcp_servers:`).
//!
//! serde's `BTreeMap` keeps the last of two equal keys, so a `before_tool:` written twice would
//! silently drop the first list, while a top-level key written twice is an error (`duplicate
//! field`). [`UniqueMap`] refuses the repeat the same way. Owns only that check: the values
//! deserialize as usual, and the caller's parse names the file.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Error, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// A string-keyed map that fails to deserialize when a key occurs twice, with
/// ``duplicate key `<key>` `` (serde_yaml adds the position).
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueMap<V>(pub BTreeMap<String, V>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for UniqueMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for Keys<V> {
            type Value = UniqueMap<V>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut map = BTreeMap::new();
                while let Some(key) = access.next_key::<String>()? {
                    if map.contains_key(&key) {
                        return Err(A::Error::custom(format!("duplicate key `{key}`")));
                    }
                    let value = access.next_value()?;
                    map.insert(key, value);
                }
                Ok(UniqueMap(map))
            }
        }

        deserializer.deserialize_map(Keys(PhantomData))
    }
}

/// For `#[serde(deserialize_with = "crate::unique_map::deserialize")]` on a `BTreeMap<String, V>`
/// field. Errors: as [`UniqueMap`].
pub fn deserialize<'de, D: Deserializer<'de>, V: Deserialize<'de>>(deserializer: D) -> Result<BTreeMap<String, V>, D::Error> {
    UniqueMap::deserialize(deserializer).map(|m| m.0)
}

#[cfg(test)]
mod tests {
    use crate::role::parse_meta;

    #[test]
    fn a_key_written_twice_in_hooks_or_mcp_servers_is_an_error_naming_file_and_key() {
        let hooks = "hooks:\n  before_tool:\n    - {command: a.sh}\n  before_tool:\n    - {command: b.sh}\n";
        assert_eq!(
            parse_meta(hooks, "r/meta.yaml").unwrap_err().to_string(),
            "r/meta.yaml: hooks: duplicate key `before_tool` at line 2 column 3"
        );
        let servers = "mcp_servers:\n  fs: {command: a}\n  fs: {command: b}\n";
        assert_eq!(
            parse_meta(servers, "r/meta.yaml").unwrap_err().to_string(),
            "r/meta.yaml: mcp_servers: duplicate key `fs` at line 2 column 3"
        );
        let ok = parse_meta("hooks:\n  before_tool: [{command: a.sh}]\n  after_tool: [{command: b.sh}]\nmcp_servers:\n  fs: {command: a}\n  git: {command: b}\n", "m").unwrap();
        assert_eq!(ok.mcp_servers.keys().collect::<Vec<_>>(), ["fs", "git"]);
        assert_eq!(ok.hooks.get(crate::hooks::HookName::AfterTool)[0].command, "b.sh");
    }
}
