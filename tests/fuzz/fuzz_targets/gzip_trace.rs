//! Any bytes as a gzip trace file: read as analyze reads it (gzip framing, the inflate while
//! parsing); a trace or an error, never a panic or a hang.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    steptrace::fuzzing::gzip_trace(data);
});
