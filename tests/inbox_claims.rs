//! What a real `serve` claims from an inbox (docs/design.md §10): a new message under a name that
//! was claimed and answered before is a new message; a file still being written is left out
//! of every claim until its writer is done, then read whole; a hand-broken `wake.json` claims
//! nothing and says so, and the messages wait for the wake that can run.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use cicy::wake::db::WakeDb;
use cicy::wake::inbox::{Folder, Mailbox};

use cicy_test_support::gateway::{anthropic_text, Reply, ScriptedGateway};
use cicy_test_support::serve::{Frame, Serve};
use cicy_test_support::wake::{last_user_text, note, waker};

/// **[chosen]** A grace no test step can outlast: only a writer's close makes a file whole.
const NO_GRACE_RUNS_OUT: (&str, &str) = ("CICY_WRITE_GRACE_MS", "3600000");

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).filter(|e| e.path().is_file()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn woke_for(frames: &[Frame]) -> serde_json::Value {
    frames.iter().find(|f| f.event == "wake").expect("a wake").data["messages"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_saved_again_under_an_answered_name_wakes_the_agent() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    gw.fallback(|n| Reply::sse(anthropic_text(&format!("answer {n}"))));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    let mb = Mailbox::of_workspace(&t.workspace(&id));
    let path = mb.inbox_dir().join("x.md");
    std::fs::write(&path, "---\nfrom: human\nsubject: x\n---\n\nfirst\n").unwrap();
    assert_eq!(woke_for(&events.until("done").await), serde_json::json!(["x.md"]));

    // An editor's save by rename, under the name that was claimed and answered.
    let swap = mb.inbox_dir().join(".x.md.swp");
    std::fs::write(&swap, "---\nfrom: human\nsubject: x\n---\n\nsecond\n").unwrap();
    std::fs::rename(&swap, &path).unwrap();
    assert_eq!(woke_for(&events.until("done").await), serde_json::json!(["x~1.md"]));
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert!(last_user_text(&reqs[1]).ends_with("| second"), "{}", last_user_text(&reqs[1]));
    assert_eq!(names(&mb.archive_dir()), ["x.md", "x~1.md"]);
    assert_eq!(std::fs::read_to_string(mb.archive_dir().join("x~1.md")).unwrap(), "---\nfrom: human\nsubject: x\n---\n\nsecond\n");
    assert_eq!(WakeDb::open(&t.home).unwrap().obligation_count_unresolved(&id).unwrap(), 0);
    assert_eq!(s.stop().await, 0);
}

/// A message written in place in two parts, with another message arriving between them: that
/// one's claim leaves the slow one alone, which is read whole once its writer closes it.
/// `pause` is the writer's rest before the other message comes, under serve's `grace`.
async fn a_slow_message_is_left_out_of_another_claim_and_read_whole(grace: (&str, &str), pause: Duration) {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    gw.fallback(|n| Reply::sse(anthropic_text(&format!("answer {n}"))));
    let s = Serve::start_with(t.root(), &gw.url(), &[], &[grace]).await;
    let mut events = s.events(&id, None).await;
    let mb = Mailbox::of_workspace(&t.workspace(&id));
    let slow = mb.inbox_dir().join("m.md");
    let mut writer = std::fs::File::create(&slow).unwrap();
    writer.write_all(b"---\nfrom: ann\nsubject: slow\n---\n\nPART-").unwrap();
    // The writer's pause is the scenario, not a wait for serve.
    tokio::time::sleep(pause).await;
    let other = mb.write(Folder::Inbox, &note("human", "meanwhile")).unwrap();
    assert_eq!(woke_for(&events.until("done").await), serde_json::json!([other.name]));
    assert_eq!(names(&mb.inbox_dir()), ["m.md"]);

    writer.write_all(b"REST").unwrap();
    drop(writer);
    assert_eq!(woke_for(&events.until("done").await), serde_json::json!(["m.md"]));
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert!(last_user_text(&reqs[1]).ends_with("| PART-REST"), "{}", last_user_text(&reqs[1]));
    assert_eq!(std::fs::read_to_string(mb.archive_dir().join("m.md")).unwrap(), "---\nfrom: ann\nsubject: slow\n---\n\nPART-REST");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_written_in_place_in_two_parts_is_left_out_of_another_claim_and_read_whole() {
    a_slow_message_is_left_out_of_another_claim_and_read_whole(NO_GRACE_RUNS_OUT, Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_writer_pauses_longer_than_the_grace_is_left_out_of_another_claim_until_it_is_closed() {
    // It rests unchanged well past the grace, still open, when the next message's claim
    // looks at it.
    a_slow_message_is_left_out_of_another_claim_and_read_whole(("CICY_WRITE_GRACE_MS", "200"), Duration::from_millis(1000)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_wake_json_claims_nothing_names_the_file_and_the_message_waits_for_a_wake_that_can_run() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    gw.fallback(|n| Reply::sse(anthropic_text(&format!("answer {n}"))));
    let ws = t.workspace(&id);
    let wake_json = ws.join(".cicy").join("wake.json");
    std::fs::create_dir_all(wake_json.parent().unwrap()).unwrap();
    std::fs::write(&wake_json, "{\"wakes\": 3,").unwrap();
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    let mb = Mailbox::of_workspace(&ws);
    let first = mb.write(Folder::Inbox, &note("human", "are you there?")).unwrap();
    let error = loop {
        let f = events.next().await.unwrap();
        if f.event == "error" {
            break f.data;
        }
    };
    assert_eq!(names(&mb.inbox_dir()), std::slice::from_ref(&first.name), "not claimed, not archived");
    assert!(names(&mb.archive_dir()).is_empty());
    assert_eq!(WakeDb::open(&t.home).unwrap().obligation_count_unresolved(&id).unwrap(), 0);
    assert_eq!(error["kind"], "wake");
    assert_eq!(
        error["message"].as_str().unwrap(),
        format!(
            "the wake cannot run (its messages and todos stay pending): {}: EOF while parsing a value at line 1 column 12",
            wake_json.display()
        )
    );
    assert_eq!(std::fs::read(&wake_json).unwrap(), b"{\"wakes\": 3,", "the broken file is not overwritten");

    // Repaired: the next message's wake takes both.
    std::fs::write(&wake_json, "{\"wakes\": 3, \"previous_crash\": false}").unwrap();
    let second = mb.write(Folder::Inbox, &note("human", "hello?")).unwrap();
    let frames = events.until("done").await;
    assert_eq!(woke_for(&frames), serde_json::json!([first.name, second.name]));
    assert_eq!(frames.iter().find(|f| f.event == "wake").unwrap().data["n"], 4);
    assert_eq!(gw.requests().len(), 1);
    assert_eq!(s.stop().await, 0);
}
