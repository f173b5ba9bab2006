//! Any bytes as a JSON text: the events walk over text arriving only as far as asked equals
//! the walk over the whole text.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    steptrace::fuzzing::arriving_walk(data);
});
