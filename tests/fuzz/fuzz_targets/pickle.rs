//! Any bytes as a memory snapshot pickle.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    steptrace::fuzzing::pickle(data);
});
