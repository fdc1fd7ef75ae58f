//! Tests of `store.rs`: the slug rule, the file format, tolerant reading and the archive.

use super::*;

use crate::test_support::set_mtime;

fn rec(id: &str, salience: u8, content: &str) -> Record {
    crate::test_support::rec(id, MemoryType::Fact, "", salience, content)
}

#[test]
fn slugs_follow_the_rule() {
    let cases = [
        ("preference_colour", Some("preference_colour")),
        ("Preference_Colour", Some("preference_colour")),
        ("../../etc/x", Some("etc_x")),
        ("/etc/passwd", Some("etc_passwd")),
        ("a  b!!c", Some("a_b_c")),
        ("--x--", Some("x")),
        ("café au lait", Some("caf_au_lait")),
        ("偏好_颜色", Some("偏好_颜色")),
        ("fact:ünïcode", Some("fact_n_code")),
        ("..", None),
        ("", None),
        ("___", None),
        ("MEMORY", None),
        ("memory", None),
    ];
    for (input, want) in cases {
        assert_eq!(slug(input).as_deref(), want, "{input}");
    }
    let long = "记".repeat(100);
    let s = slug(&long).unwrap();
    assert_eq!(s.len(), 78, "26 three-byte characters fit in 80 bytes");
    let s = slug(&format!("{}_{}", "a".repeat(79), "b")).unwrap();
    assert_eq!(s, "a".repeat(79), "a cut that ends in `_` is trimmed again");
}

#[test]
fn a_written_file_reads_back_exactly_even_with_tricky_values() {
    let dir = tempfile::tempdir().unwrap();
    let r = Record {
        mem_id: "fact_agent".into(),
        kind: MemoryType::Fact,
        title: "007".into(),
        salience: 5,
        tags: vec!["yes".into(), "2024-01-01".into(), "a: b".into(), "- dash".into()],
        updated: "2026-01-01T00:00:00Z".into(),
        content: "The user's codename is 007.\nIt says: \"yes\" — 是的.".into(),
    };
    let w = write(dir.path(), &r).unwrap();
    assert!(!w.updated);
    let text = std::fs::read_to_string(&w.path).unwrap();
    insta::assert_snapshot!("memory_file_with_tricky_values", text);
    let back = read(&w.path).unwrap();
    assert_eq!(back.record, r);
    let again = write(dir.path(), &Record { salience: 4, ..r.clone() }).unwrap();
    assert!(again.updated && again.moved_aside.is_none(), "same slug = update");
    assert_eq!(read(&again.path).unwrap().record.salience, 4);
}

#[test]
fn write_refuses_an_id_that_is_not_a_slug() {
    let dir = tempfile::tempdir().unwrap();
    for id in ["../../etc/x", "Upper", "a/b", ""] {
        assert!(matches!(write(dir.path(), &rec(id, 3, "x")), Err(MemoryError::InvalidId(_))), "{id}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn hand_edits_are_read_tolerantly() {
    let ok = [
        (
            "bom_crlf",
            "\u{feff}---\r\ntype: fact\r\ntitle: Shell\r\nsalience: 4\r\n---\r\n\r\nUses zsh.\r\n",
            "Shell",
            4,
            vec![],
            "Uses zsh.",
        ),
        ("old_mac", "---\rtype: fact\r---\rUses zsh.\r", "", 3, vec![], "Uses zsh."),
        ("tabs", "---\ntype:\tpreference\ntags:\n\t- a\n\t- b\n---\nTabs.\n", "", 3, vec!["a", "b"], "Tabs."),
        ("indented_block", "---\n\ttype: fact\n\ttitle: tabs\n\tsalience: 007\n---\n\nTabbed.\n", "tabs", 3, vec![], "Tabbed."),
        ("spaced_block", "---\n  type: fact\n  salience: 4\n  tags:\n    - x\n---\nSpaced.\n", "", 4, vec!["x"], "Spaced."),
        (
            "yes_007_date",
            "---\ntype: fact\ntitle: 007\ntags: yes\nupdated: 2024-01-01\nsalience: '5'\n---\nCode name.\n",
            "007",
            5,
            vec!["yes"],
            "Code name.",
        ),
        ("yes_title", "---\ntype: FACT\ntitle: yes\nsalience: 9\ntags: a, b\n---\nYes.\n", "yes", 3, vec!["a", "b"], "Yes."),
        (
            "extra_keys",
            "---\ntype: lesson\nmem_id: something_else\nsource: me\nsalience: 2.0\n---\n# Heading\n\n---\nbody with a rule\n",
            "",
            2,
            vec![],
            "# Heading\n\n---\nbody with a rule",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (id, text, title, salience, tags, content) in ok {
        let p = dir.path().join(format!("{id}.md"));
        std::fs::write(&p, text).unwrap();
        let m = read(&p).unwrap_or_else(|b| panic!("{id}: {}", b.reason));
        assert_eq!(m.record.mem_id, id);
        assert_eq!(m.record.title, title, "{id}");
        assert_eq!(m.record.salience, salience, "{id}");
        assert_eq!(m.record.tags, tags, "{id}");
        assert_eq!(m.record.content, content, "{id}");
    }
    let p = dir.path().join("yes_007_date.md");
    assert_eq!(read(&p).unwrap().record.updated, "2024-01-01");
}

#[test]
fn bad_files_are_reported_with_a_reason_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: [(&str, &[u8], &str); 8] = [
        ("no_close.md", b"---\ntype: fact\nbody without a closing line\n", "the front matter is not closed by a `---` line"),
        ("latin1.md", b"---\ntype: fact\n---\ncaf\xe9\n", "not UTF-8 (invalid byte at offset 22)"),
        ("plain.md", b"just a note\n", "no front matter: the file must start with a `---` line"),
        ("empty_fm.md", b"---\n---\ncontent\n", "the front matter is empty (it needs at least `type:`)"),
        (
            "bad_type.md",
            b"---\ntype: opinion\n---\nx\n",
            "unknown type `opinion` (one of: preference, fact, person, knowledge, procedure, constraint, lesson)",
        ),
        ("no_content.md", b"---\ntype: fact\n---\n\n  \n", "no content after the front matter"),
        ("Bad Name.md", b"---\ntype: fact\n---\nx\n", "the file name is not a memory id; rename it to `bad_name.md`"),
        ("bad_yaml.md", b"---\ntype: fact\ntitle: [unclosed\n---\nx\n", "front matter is not valid YAML"),
    ];
    for (name, bytes, _) in &cases {
        std::fs::write(d.join(name), bytes).unwrap();
    }
    let scan = scan(d).unwrap();
    assert!(scan.memories.is_empty());
    assert_eq!(scan.bad.len(), cases.len());
    for (name, bytes, reason) in &cases {
        let b = scan.bad.iter().find(|b| b.path == d.join(name)).unwrap_or_else(|| panic!("{name} not reported"));
        assert!(b.reason.starts_with(reason), "{name}: {}", b.reason);
        assert_eq!(std::fs::read(d.join(name)).unwrap(), *bytes, "{name} must be left as it was");
    }
}

#[test]
fn an_update_never_overwrites_a_file_that_does_not_parse() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("fact_x.md"), b"---\ntype: fact\nbroken, never closed\n").unwrap();
    let w = write(d, &rec("fact_x", 3, "new content")).unwrap();
    let moved = w.moved_aside.expect("moved aside");
    assert_eq!(std::fs::read(&moved).unwrap(), b"---\ntype: fact\nbroken, never closed\n");
    assert!(moved.file_name().unwrap().to_string_lossy().starts_with("fact_x.md.corrupt-"));
    assert_eq!(read(&w.path).unwrap().record.content, "new content");
    assert_eq!(memory_paths(d).unwrap(), vec![w.path.clone()], "the moved file is no longer a memory");
}

#[test]
fn over_120_memories_the_weakest_move_to_the_archive_until_100_remain() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 130 memories: salience 1..=5 by i % 5, older for smaller i.
    for i in 0..130u64 {
        let id = format!("fact_{i:03}");
        write(d, &rec(&id, (i % 5 + 1) as u8, &format!("fact {i}"))).unwrap();
        set_mtime(&d.join(format!("{id}.md")), 10_000 - i);
    }
    let archived = enforce_limit(d).unwrap();
    assert_eq!(archived.len(), 30);
    // The 26 of salience 1, then the 4 oldest of salience 2 (i = 1, 6, 11, 16).
    let mut want: Vec<String> = (0..130).step_by(5).map(|i| format!("fact_{i:03}")).collect();
    want.extend([1, 6, 11, 16].map(|i| format!("fact_{i:03}")));
    assert_eq!(archived, want);
    let left = scan(d).unwrap().memories;
    assert_eq!(left.len(), 100);
    assert!(left.iter().all(|m| m.record.salience >= 2));
    let in_archive = std::fs::read_dir(d.join(ARCHIVE_DIR)).unwrap().count();
    assert_eq!(in_archive, 30);
    assert!(d.join(ARCHIVE_DIR).join("fact_000.md").exists());
    assert!(enforce_limit(d).unwrap().is_empty(), "100 is within the limit");
}

#[test]
fn archiving_twice_keeps_both_copies() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, &rec("fact_a", 3, "first")).unwrap();
    assert_eq!(archive(d, "fact_a").unwrap(), d.join("_archive/fact_a.md"));
    write(d, &rec("fact_a", 3, "second")).unwrap();
    assert_eq!(archive(d, "Fact_A").unwrap(), d.join("_archive/fact_a.1.md"));
    assert!(matches!(archive(d, "fact_a"), Err(MemoryError::NotFound { .. })));
    assert!(matches!(archive(d, "../.."), Err(MemoryError::InvalidId(_))));
}
