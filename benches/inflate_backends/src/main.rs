//! One gzip stream's deflate data inflated by each library into one buffer of [`WINDOW`] bytes
//! used again and again, as steptrace's single-stream read fills its ring of windows
//! (`src/read/source.rs`, `Inflating`), on one thread; and libdeflate, which does not stream,
//! into one buffer of the whole text's size; and zlib-rs into fresh memory of that size, as
//! the whole-text read did before the ring (what the ring saves). Prints each one's
//! fastest and median time of `ROUNDS` rounds (default 5, interleaved). The figures and the
//! choice they made are in docs/performance.md ("Inflate libraries").

use std::time::Instant;

/// The single-stream read's window (`json_scan` pieces are the same size).
const WINDOW: usize = 2 << 20;

/// The deflate data of a one-member gzip file and its stated length (ISIZE).
fn deflate_body(gz: &[u8]) -> (&[u8], usize) {
    assert!(
        gz.len() > 18 && gz[..3] == [0x1f, 0x8b, 8],
        "not a gzip file"
    );
    let (flags, mut at) = (gz[3], 10);
    if flags & 4 != 0 {
        at += 2 + u16::from_le_bytes([gz[at], gz[at + 1]]) as usize;
    }
    // FNAME, FCOMMENT: zero-terminated.
    for bit in [8, 16] {
        if flags & bit != 0 {
            at += gz[at..].iter().position(|&b| b == 0).expect("terminated") + 1;
        }
    }
    if flags & 2 != 0 {
        at += 2;
    }
    let isize = u32::from_le_bytes(gz[gz.len() - 4..].try_into().expect("4 bytes"));
    (&gz[at..gz.len() - 8], isize as usize)
}

/// What an inflate gave: its length and a sample of its bytes, so that the libraries can be
/// checked against each other (and the compiler cannot drop the work).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Out {
    len: usize,
    sample: u64,
}

impl Out {
    fn add(&mut self, window: &[u8]) {
        self.len += window.len();
        let s: u64 = window.iter().step_by(4096).map(|&b| u64::from(b)).sum();
        self.sample = self.sample.wrapping_add(s);
    }
}

/// zlib's interface, as zlib-rs and zlib-ng both give it: raw inflate into `buf` over and over.
macro_rules! zlib_interface {
    ($name:ident, $z:ident) => {
        fn $name(body: &[u8], buf: &mut [u8]) -> Out {
            use $z as z;
            // z_stream holds function pointers that may not be zero as a Rust value; it is
            // only ever used through the pointer, as C code would.
            let mut m = std::mem::MaybeUninit::<z::z_stream>::zeroed();
            let s = m.as_mut_ptr();
            // SAFETY: `s` points to a zeroed z_stream (zalloc/zfree null: the library's own),
            // which inflateInit2_ initialises; the version and size are the library's own.
            let r = unsafe {
                z::inflateInit2_(
                    s,
                    -15,
                    z::zlibVersion(),
                    std::mem::size_of::<z::z_stream>() as i32,
                )
            };
            assert_eq!(r, 0, "inflateInit2");
            // SAFETY: `s` is initialised; the input outlives every inflate call below.
            unsafe {
                (*s).next_in = body.as_ptr() as *mut _;
                (*s).avail_in = body.len() as _;
            }
            let mut out = Out { len: 0, sample: 0 };
            loop {
                // SAFETY: `buf` is writable for its length and outlives the call.
                let r = unsafe {
                    (*s).next_out = buf.as_mut_ptr();
                    (*s).avail_out = buf.len() as _;
                    z::inflate(s, 0)
                };
                // SAFETY: `s` is initialised.
                let n = buf.len() - unsafe { (*s).avail_out } as usize;
                out.add(&buf[..n]);
                if r == 1 {
                    break;
                }
                assert!(r == 0 || r == -5, "inflate returned {r}");
            }
            // SAFETY: `s` was initialised by inflateInit2_ and is ended once.
            unsafe { z::inflateEnd(s) };
            out
        }
    };
}
zlib_interface!(zlib_rs, libz_rs_sys);
zlib_interface!(zlib_ng, libz_ng_sys);

/// zlib-rs through flate2's interface (the Rust one, not zlib's C interface).
fn flate2_zlib_rs(body: &[u8], buf: &mut [u8]) -> Out {
    use flate2::{Decompress, FlushDecompress, Status};
    let mut d = Decompress::new(false);
    let (mut at, mut out) = (0, Out { len: 0, sample: 0 });
    loop {
        let (i, o) = (d.total_in(), d.total_out());
        let status = d
            .decompress(&body[at..], buf, FlushDecompress::None)
            .expect("one deflate stream");
        at += (d.total_in() - i) as usize;
        out.add(&buf[..(d.total_out() - o) as usize]);
        if status == Status::StreamEnd {
            break;
        }
    }
    out
}

fn miniz_oxide(body: &[u8], buf: &mut [u8]) -> Out {
    use miniz_oxide::inflate::stream::{inflate, InflateState};
    use miniz_oxide::{DataFormat, MZFlush, MZStatus};
    let mut st = InflateState::new_boxed(DataFormat::Raw);
    let (mut at, mut out) = (0, Out { len: 0, sample: 0 });
    loop {
        let r = inflate(&mut st, &body[at..], buf, MZFlush::None);
        at += r.bytes_consumed;
        out.add(&buf[..r.bytes_written]);
        match r.status {
            Ok(MZStatus::StreamEnd) => break,
            Ok(_) => {}
            Err(e) => panic!("miniz_oxide: {e:?}"),
        }
    }
    out
}

fn isa_l(body: &[u8], buf: &mut [u8]) -> Out {
    use isal::isal_sys::igzip_lib as i;
    let mut st = std::mem::MaybeUninit::<i::inflate_state>::uninit();
    // SAFETY: isal_inflate_init initialises the whole state it is given.
    unsafe { i::isal_inflate_init(st.as_mut_ptr()) };
    // SAFETY: initialised just above.
    let mut st = unsafe { st.assume_init() };
    st.crc_flag = i::IGZIP_DEFLATE as _;
    st.next_in = body.as_ptr() as *mut _;
    st.avail_in = body.len() as _;
    let mut out = Out { len: 0, sample: 0 };
    loop {
        st.next_out = buf.as_mut_ptr();
        st.avail_out = buf.len() as _;
        // SAFETY: the state is initialised; its input and `buf` outlive the call.
        let r = unsafe { i::isal_inflate(&mut st) };
        assert_eq!(r, 0, "isal_inflate returned {r}");
        out.add(&buf[..buf.len() - st.avail_out as usize]);
        if st.block_state == i::isal_block_state_ISAL_BLOCK_FINISH {
            break;
        }
    }
    out
}

fn libdeflate_whole(body: &[u8], whole: &mut [u8]) -> Out {
    use libdeflate_sys as ld;
    // SAFETY: takes no arguments; the result is checked for null.
    let d = unsafe { ld::libdeflate_alloc_decompressor() };
    assert!(!d.is_null());
    let mut written = 0usize;
    // SAFETY: `d` is live; `body` is readable and `whole` writable for their lengths;
    // `written` is valid for a write.
    let r = unsafe {
        ld::libdeflate_deflate_decompress(
            d,
            body.as_ptr().cast(),
            body.len(),
            whole.as_mut_ptr().cast(),
            whole.len(),
            &mut written,
        )
    };
    // SAFETY: `d` came from libdeflate_alloc_decompressor and is freed once.
    unsafe { ld::libdeflate_free_decompressor(d) };
    assert_eq!(r, 0, "libdeflate returned {r}");
    let mut out = Out { len: 0, sample: 0 };
    // Sampled window by window, so that the sample matches the streaming ones'.
    for w in whole[..written].chunks(WINDOW) {
        out.add(w);
    }
    out
}

type Inflate = fn(&[u8], &mut [u8]) -> Out;

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let paths: Vec<String> = std::env::args().skip(1).collect();
    assert!(!paths.is_empty(), "usage: inflate_backends FILE.json.gz...");
    let streaming: [(&str, Inflate); 5] = [
        ("miniz_oxide", miniz_oxide),
        ("zlib-rs (zlib's interface)", zlib_rs),
        ("zlib-rs (flate2's)", flate2_zlib_rs),
        ("zlib-ng", zlib_ng),
        ("ISA-L (igzip)", isa_l),
    ];
    for path in &paths {
        let gz = std::fs::read(path).expect("readable input");
        let (body, len) = deflate_body(&gz);
        println!(
            "{path}: {:.1} MB of text, {:.1} MB compressed; {rounds} rounds, one thread: \
             fastest / median s (text MB/s at the median)",
            len as f64 / 1e6,
            gz.len() as f64 / 1e6
        );
        let mut window = vec![0u8; WINDOW];
        let mut whole = vec![0u8; len];
        let mut times = vec![Vec::new(); streaming.len() + 2];
        let mut first: Option<Out> = None;
        for _ in 0..rounds {
            for (k, &(name, f)) in streaming.iter().enumerate() {
                let t = Instant::now();
                let out = f(body, &mut window);
                times[k].push(t.elapsed().as_secs_f64());
                assert_eq!(*first.get_or_insert(out), out, "{name} differs");
            }
            let t = Instant::now();
            let out = libdeflate_whole(body, &mut whole);
            times[streaming.len()].push(t.elapsed().as_secs_f64());
            assert_eq!(first, Some(out), "libdeflate differs");
            // zlib-rs into fresh memory of the text's size, as the whole-text read did before
            // the ring of windows (its page faults are what the ring saves).
            let t = Instant::now();
            // Zeroed by the allocator's fresh mapping, not by a pass over it: its pages are
            // faulted in as the inflate writes them.
            let mut fresh = vec![0u8; len];
            let out = zlib_rs(body, &mut fresh);
            times[streaming.len() + 1].push(t.elapsed().as_secs_f64());
            assert_eq!(out.len, len, "zlib-rs into fresh memory");
            drop(fresh);
        }
        let names = streaming
            .iter()
            .map(|&(n, _)| format!("{n}, 2 MiB window reused"))
            .chain([
                "libdeflate, whole text (cannot stream)".to_string(),
                "zlib-rs, into fresh memory of the text's size".to_string(),
            ]);
        for (name, t) in names.zip(&mut times) {
            t.sort_by(f64::total_cmp);
            let median = t[t.len() / 2];
            println!(
                "  {name:<52} {:.3} / {median:.3}  ({:.0} MB/s)",
                t[0],
                len as f64 / 1e6 / median
            );
        }
    }
}
