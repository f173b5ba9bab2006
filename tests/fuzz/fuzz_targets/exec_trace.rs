//! Any bytes as an Execution Trace.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    steptrace::fuzzing::exec_trace(data);
});
