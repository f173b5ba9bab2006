use super::*;
use crate::diagnostics::Diagnostics;

const TEXT: &str = r#"{"schemaVersion":1,
  "traceEvents": [
  {"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":5},
  {"ph":"X","cat":"cpu_op","name":"b","pid":1,"tid":1,"ts":2,"dur":1},
  {"ph":"i","s":"g","name":"c","pid":1,"tid":1,"ts":9}
  ],
  "traceName": "t"
}"#;

/// The added events go in at one point of the original text, which stays byte
/// for byte around them, for the whole trace and for every cut of it (a truncated trace
/// keeps its complete events and is closed).
#[test]
fn added_events_make_valid_json_at_every_cut() {
    let extras = br#"{"ph":"M","name":"process_name","pid":9,"tid":0},
{"ph":"C","name":"m","pid":9,"tid":0,"ts":1,"args":{"x":1}}"#;
    let start = TEXT.find('[').unwrap();
    for cut in start + 1..=TEXT.len() {
        let text = &TEXT.as_bytes()[..cut];
        let mut d = Diagnostics::default();
        let Ok(t) =
            crate::model::kineto_from_bytes(Path::new("t.json"), text.to_vec(), false, &mut d)
        else {
            continue;
        };
        let span = t.events_span;
        // The same reader the gzip path compresses from.
        let mut out = Vec::new();
        Spliced {
            inner: text,
            head_left: span.insert_at as u64,
            mid: middle(span, extras),
            mid_at: 0,
            rest: span.complete,
        }
        .read_to_end(&mut out)
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("cut {cut}: {e}\n{}", String::from_utf8_lossy(&out)));
        let n = v["traceEvents"].as_array().unwrap().len();
        assert_eq!(n, t.event_count + 2, "cut {cut}");
        assert_eq!(&out[..span.insert_at], &text[..span.insert_at]);
        if cut == TEXT.len() {
            assert!(span.complete);
            assert!(out.ends_with(&text[span.insert_at..]));
            assert_eq!(v["traceName"], "t");
        }
    }
}

/// A trace in capture's gzip members: the members before the insertion point are copied
/// byte for byte, and the whole inflates to the original text with the events put in,
/// wherever the insertion point falls (in the first member, a middle one, the last).
#[test]
fn capture_gzip_members_are_copied_up_to_the_added_events() {
    use steptrace_formats::gzip_members::{members, write, PIECE};
    let mut text = b"{\"traceEvents\": [".to_vec();
    let mut i = 0;
    while text.len() < 3 * PIECE {
        text.extend_from_slice(format!("{{\"ph\": \"X\", \"ts\": {i}}},\n").as_bytes());
        i += 1;
    }
    text.extend_from_slice(b"{}]}\n");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("t.json.gz");
    let mut gz = Vec::new();
    write(&mut &text[..], &mut gz, 1, 2).unwrap();
    std::fs::write(&src, &gz).unwrap();
    let (m, _) = members(&gz).unwrap();
    for insert_at in [100, PIECE + 5, text.len() - 3] {
        let span = EventsSpan {
            insert_at,
            has_elements: true,
            complete: true,
        };
        let mut out = Vec::new();
        // The added events in two blocks, as they are formatted.
        let blocks = [b"{\"x\":".to_vec(), b"1}".to_vec()];
        splice_members(&src, &mut out, span, &blocks)
            .unwrap()
            .unwrap();
        let k = insert_at / PIECE;
        assert_eq!(&out[..m[k].offset], &gz[..m[k].offset], "{insert_at}");
        assert!(members(&out).is_some());
        let mut back = Vec::new();
        flate2::read::MultiGzDecoder::new(&out[..])
            .read_to_end(&mut back)
            .unwrap();
        let mut want = text[..insert_at].to_vec();
        want.extend_from_slice(b",\n{\"x\":1}");
        want.extend_from_slice(&text[insert_at..]);
        assert!(back == want, "{insert_at}");
    }
}
