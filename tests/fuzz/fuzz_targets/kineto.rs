//! Any bytes as a Kineto trace: parse, and when that succeeds, rebuild and analyse the step.
//! Nothing may panic, hang, or allocate out of proportion to the input.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    steptrace::fuzzing::kineto(data);
});
