//! Writes a file the way `steptrace capture` writes its `.gz` files, with capture's own writer
//! and level (`capture/src/finalize`): `cargo run --release -p steptrace-formats --example
//! gzip_members -- IN OUT.json.gz [MEMBER_KIB]`. IN may be plain or gzip. The benchmark makes
//! its capture-form input with it, so that the file timed is the real writer's; MEMBER_KIB
//! (default capture's, `gzip_members::PIECE`) writes members of another size, to measure what
//! that changes.

use std::io::{BufReader, BufWriter, Read, Write};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match args.as_slice() {
        [src, dst] => Some((src, dst, steptrace_formats::gzip_members::PIECE)),
        [src, dst, kib] => kib
            .parse::<usize>()
            .ok()
            .filter(|&k| k > 0)
            .map(|k| (src, dst, k << 10)),
        _ => None,
    };
    let Some((src, dst, piece)) = parsed else {
        eprintln!("usage: gzip_members IN OUT.json.gz [MEMBER_KIB]");
        std::process::exit(2);
    };
    let mut file = BufReader::new(std::fs::File::open(src)?);
    let mut head = [0u8; 2];
    let n = file.read(&mut head)?;
    let whole = std::io::Cursor::new(head[..n].to_vec()).chain(file);
    let mut input: Box<dyn Read> = if head[..n] == [0x1f, 0x8b] {
        Box::new(flate2::bufread::MultiGzDecoder::new(BufReader::new(whole)))
    } else {
        Box::new(whole)
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = BufWriter::new(std::fs::File::create(dst)?);
    steptrace_formats::gzip_members::write_sized(&mut input, &mut out, 6, threads, piece)?;
    out.flush()
}
