//! Any bytes as one Kineto event: where the hand-written fast reader accepts them, serde_json
//! must read the same event (the fast reader only ever takes a shortcut, never a liberty).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    steptrace::fuzzing::kineto_event(data);
});
