use std::time::Duration;

use super::*;

fn at(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, TIMESTAMP_FORMAT).unwrap()
}

const UNIQUE: Unique = Unique { nanos: 0x1234_5678_9abc_def0, pid: 0xabc, seq: 7 };

fn new(from: &str, subject: Option<&str>, body: &str) -> NewMessage {
    NewMessage { from: from.into(), subject: subject.map(Into::into), body: body.into(), ..Default::default() }
}

#[test]
fn file_name_has_the_cryo_shape() {
    let r = render(&new("human", Some("Hello, World!"), "hi"), at("2026-12-01T09:30:00"), UNIQUE);
    assert_eq!(r.name, "2026-12-01T09-30-00_hello--world_0000000000000000123456789abcdef0_00000abc_0007.md");
}

#[test]
fn slug_keeps_unicode_alphanumerics_and_trims_dashes() {
    assert_eq!(slug("Été à Paris"), "été-à-paris");
    assert_eq!(slug("  日本語 テスト?"), "日本語-テスト");
    assert_eq!(slug("--Re: build #42--"), "re--build--42");
    assert_eq!(slug("!!!"), "");
}

#[test]
fn empty_or_long_slug_becomes_an_8_hex_hash_of_body_from_subject() {
    assert_eq!(name_base("hi there", "ann", "!!!"), "74b8a7ba");
    let long = "x".repeat(129);
    assert_eq!(name_base("body", "human", &long), "b3f21121");
    let exactly = "é".repeat(64); // 128 bytes: still a slug
    assert_eq!(name_base("body", "human", &exactly), exactly);
    assert_eq!(name_base("body", "human", &"é".repeat(65)).len(), 8);
}

#[test]
fn subject_is_sanitized_or_derived_from_the_first_body_line() {
    assert_eq!(subject_of(&new("a", Some(" line\r\nbreak "), "b")), "line  break");
    assert_eq!(subject_of(&new("a", Some("  "), "\n\n  first line  \nsecond")), "first line");
    let long = "ü".repeat(70);
    assert_eq!(subject_of(&new("a", None, &long)), "ü".repeat(60));
    assert_eq!(subject_of(&new("a", None, " \n ")), "");
}

#[test]
fn render_writes_the_a6_front_matter_byte_exact() {
    let mut msg = new("human", Some("Status?"), "How is the build going?\n");
    msg.question = true;
    msg.meta.insert("thread".into(), "t-1".into());
    msg.meta.insert("conv".into(), "group:ops\nforged: x".into());
    let r = render(&msg, at("2026-12-01T09:30:05"), UNIQUE);
    insta::assert_snapshot!(r.content, @r"
    ---
    from: human
    subject: Status?
    timestamp: 2026-12-01T09:30:05
    question: true
    conv: group:ops forged: x
    thread: t-1
    ---

    How is the build going?
    ");
    assert!(r.content.ends_with("going?\n"), "the body is written exactly");
    let parsed = parse(&r.name, &r.content, None).unwrap();
    assert_eq!(
        parsed,
        MessageFile {
            name: r.name.clone(),
            from: "human".into(),
            subject: "Status?".into(),
            timestamp: "2026-12-01T09:30:05".into(),
            question: true,
            meta: [("conv".to_string(), "group:ops forged: x".to_string()), ("thread".to_string(), "t-1".to_string())].into(),
            body: "How is the build going?".into(),
        }
    );
}

#[test]
fn cr_lf_in_headers_cannot_forge_a_line() {
    let msg = new("ann\nquestion: true", Some("hi\r\ntimestamp: 1999-01-01T00:00:00\n---\nbody"), "real");
    let r = render(&msg, at("2026-12-01T09:30:05"), UNIQUE);
    let p = parse(&r.name, &r.content, None).unwrap();
    assert_eq!(p.from, "ann question: true");
    assert_eq!(p.subject, "hi  timestamp: 1999-01-01T00:00:00 --- body");
    assert_eq!((p.timestamp.as_str(), p.question, p.body.as_str()), ("2026-12-01T09:30:05", false, "real"));
    assert!(p.meta.is_empty());
}

#[test]
fn parse_rules_of_a6() {
    let text = "\n\n---\nfrom:  bob \nno colon here\n: empty key\nQuestion: x\nquestion: TRUE\nurl: http://x:1\ntimestamp: 2026-01-02T03-04-05\n---\n\n  body line\n\n";
    let p = parse("n.md", text, None).unwrap();
    assert_eq!(p.from, "bob");
    assert_eq!(p.subject, "");
    assert!(p.question);
    assert_eq!(p.timestamp, "2026-01-02T03:04:05", "legacy dashed timestamp");
    let meta: Vec<(&str, &str)> = p.meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(meta, [("Question", "x"), ("url", "http://x:1")]);
    assert_eq!(p.body, "body line");
}

#[test]
fn missing_or_bad_timestamp_falls_back_to_mtime_never_now() {
    let mtime = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let expect = local_naive(mtime).format(TIMESTAMP_FORMAT).to_string();
    let p = parse("n.md", "---\nfrom: a\n---\nb", Some(mtime)).unwrap();
    assert_eq!(p.timestamp, expect);
    let p = parse("n.md", "---\ntimestamp: yesterday\n---\nb", Some(mtime)).unwrap();
    assert_eq!(p.timestamp, expect);
    let p = parse("n.md", "---\n---\nb", None).unwrap();
    assert_eq!(p.timestamp, local_naive(UNIX_EPOCH).format(TIMESTAMP_FORMAT).to_string());
}

#[test]
fn parse_errors_say_why() {
    let refused = |text| parse("n.md", text, None).unwrap_err();
    assert_eq!(refused("from: a\n"), NotAMessage::NoFrontMatter);
    assert_eq!(refused("from: a\n").to_string(), "it does not start with a `---` front matter line");
    assert_eq!(refused("---\nfrom: a\n"), NotAMessage::Unclosed);
    assert_eq!(refused("---\nfrom: a\n").to_string(), "its front matter is not closed by a `---` line");
}

#[test]
fn receive_text_is_the_a6_format() {
    let a = parse("a.md", "---\nfrom: ann\nsubject: Hi\n---\nhello", None).unwrap();
    let b = parse("b.md", "---\n---\nno headers", None).unwrap();
    assert_eq!(format_receive(&[a, b]), "--- a.md ---\nFrom: ann\nSubject: Hi\n\nhello\n\n--- b.md ---\n\nno headers\n\n");
    assert_eq!(format_receive(&[]), "");
}
