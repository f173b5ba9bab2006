//! The parse's end: the header's members, the text after the events, and what a cut file still holds.

use super::*;

/// The trace from its whole text and its events walked: the header, the warnings about the
/// text, the tables merged; with a single-stream gzip input's blocks, where the annotated
/// trace can resume its compressed stream.
pub(super) fn finish(
    path: &Path,
    buf: source::Bytes,
    (arr_start, partials, array): Walked,
    blocks: Option<(&[source::BlockStart], u64)>,
    gzip_cut: bool,
    diag: &mut Diagnostics,
) -> Result<KinetoTrace, Error> {
    let fmt_err = |what: String| Error::Format {
        path: path.to_path_buf(),
        what,
    };
    let elements = partials.iter().map(|p| p.elements).sum();

    let header = parse_header(&buf, arr_start, array.end).map_err(fmt_err)?;
    warn_after_events(&buf, array.end, path, diag);
    let truncated = truncation(buf.len(), array.end, array.cut_at, gzip_cut);
    if let Some(t) = truncated {
        diag.warn(
            "truncated_trace",
            format!(
                "{}: the trace ends early (byte {} of the text{}); analysed the {} complete events before it",
                path.display(),
                t.at_byte,
                if t.gzip_stream_cut { ", gzip stream cut" } else { "" },
                elements
            ),
        );
    }

    let mut trace = KinetoTrace {
        path: path.to_path_buf(),
        header,
        strings: Interner::new(),
        threads: Vec::new(),
        ops: Vec::new(),
        runtime: Vec::new(),
        gpu: Vec::new(),
        memory: Vec::new(),
        modules: Vec::new(),
        flows: Vec::new(),
        process_names: Vec::new(),
        event_count: elements,
        truncated,
        text_bytes: buf.len(),
        gzipped: false,
        events_span: span::events_span(&buf, arr_start, array.end, array.cut_at),
        input_text: String::new(),
        gzip_resume: None,
    };
    let span = trace.events_span;
    trace.gzip_resume = blocks.and_then(|b| gzip_resume(path, &buf, b, span));
    // Unmapping a large file takes milliseconds of page-table work that nothing waits for.
    source::drop_aside(buf);
    merge(&mut trace, partials, diag);
    if trace.ops.is_empty() && trace.gpu.is_empty() && trace.memory.is_empty() {
        diag.warn(
            "empty_trace",
            format!("{}: no operator, kernel or memory events", path.display()),
        );
    }
    Ok(trace)
}

/// A second `traceEvents`, or text after the trace's object: warned, never silent.
pub(super) fn warn_after_events(
    buf: &[u8],
    arr_end: Option<usize>,
    path: &Path,
    diag: &mut Diagnostics,
) {
    // Python's json keeps the last of two `traceEvents`, this reader the first; text after
    // the object is another writer's leftovers. Neither passes silently.
    if let Some((again, trailing)) =
        arr_end.and_then(|e| json_scan::rest_of_object(buf, e, b"traceEvents"))
    {
        if again {
            diag.warn(
                "duplicate_trace_events",
                format!(
                    "{}: the object has a second \"traceEvents\"; the first is analysed",
                    path.display()
                ),
            );
        }
        if let Some(at) = trailing {
            diag.warn(
                "trailing_data",
                format!(
                    "{}: text after the trace's object, from byte {at} of {}; ignored",
                    path.display(),
                    buf.len()
                ),
            );
        }
    }
}

/// Where a trace whose events array ended at `arr_end` (or was cut at `cut_at`) ends early, if
/// it does: the text `len` bytes long, its gzip stream `gzip_cut` or not.
pub(super) fn truncation(
    len: usize,
    arr_end: Option<usize>,
    cut_at: Option<usize>,
    gzip_cut: bool,
) -> Option<Truncation> {
    match (arr_end, cut_at) {
        (None, cut) => {
            let at = cut.unwrap_or(len);
            Some(Truncation {
                at_byte: at,
                bytes_lost: len - at,
                gzip_stream_cut: gzip_cut,
            })
        }
        (Some(_), _) if gzip_cut => Some(Truncation {
            at_byte: len,
            bytes_lost: 0,
            gzip_stream_cut: true,
        }),
        _ => None,
    }
}

pub(super) fn parse_header(
    buf: &[u8],
    arr_start: usize,
    arr_end: Option<usize>,
) -> Result<Header, String> {
    // The header is the document with the events array replaced by `[]`; for a truncated file
    // whatever followed the array is gone, so close the object instead.
    let mut text = Vec::with_capacity(arr_start + 64);
    text.extend_from_slice(&buf[..arr_start]);
    text.extend_from_slice(b"[]");
    match arr_end {
        Some(end) => text.extend_from_slice(&buf[end..]),
        None => text.push(b'}'),
    }
    // A header that does not parse (odd member types) is not worth refusing the events.
    let raw: RawHeader = serde_json::from_slice(&text).unwrap_or_default();
    let base = raw.base_time_ns.i64();
    let devices = raw
        .device_properties
        .unwrap_or_default()
        .into_iter()
        .map(|d| DeviceInfo {
            id: d.id.i64().unwrap_or(0),
            name: d.name.unwrap_or_default(),
            total_memory_bytes: d.total_global_mem.i64(),
            compute_capability: d.compute_major.i64().zip(d.compute_minor.i64()),
            num_sms: d.num_sms.i64(),
        })
        .collect();
    let flag = |l: raw::Lenient| l.i64().map(|v| v != 0);
    let (rank, world_size) = raw
        .distributed_info
        .map(|d| (d.rank.i64(), d.world_size.i64()))
        .unwrap_or((None, None));
    Ok(Header {
        schema_version: raw.schema_version.i64(),
        base_time_ns: base,
        time_convention: if base.is_some() {
            TimeConvention::RelativeToBase
        } else {
            TimeConvention::AbsoluteEpoch
        },
        devices,
        flags: [
            flag(raw.record_shapes),
            flag(raw.profile_memory),
            flag(raw.with_stack),
            flag(raw.with_modules),
            flag(raw.with_flops),
        ],
        cuda_runtime_version: raw.cuda_runtime_version.i64(),
        rank,
        world_size,
    })
}

/// Whether the event starting at `buf[0]` is one steptrace never uses, recognised from the
/// first bytes without parsing: Python function ranges other than `nn.Module` ones (half of a
/// `with_stack` trace) and `ac2g` flows (the correlation id is also on both ends' args).
/// Kineto writes `ph` and `cat` first; an event laid out otherwise is simply parsed.
pub(super) fn skippable(buf: &[u8]) -> bool {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    // Built once: constructing a searcher per event cost more than parsing the event.
    static CAT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"cat\""));
    static MODULE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"nn.Module: "));
    // Kineto's layout of a complete event, checked first: searching for `"cat"` in every
    // event was a tenth of the parse. Kineto opens each event on a line of its own (`{`, a
    // newline and an indent before `"ph"`), so the members are matched after that space.
    const COMPLETE: &[u8] = b"\"ph\": \"X\", \"cat\": ";
    const PYTHON_NAME: &[u8] = b"\"python_function\", \"name\": \"";
    let members = match buf.first() {
        Some(b'{') => &buf[json_scan::skip_ws(buf, 1)..],
        _ => &[],
    };
    if let Some(rest) = members.strip_prefix(COMPLETE) {
        if let Some(name) = rest.strip_prefix(PYTHON_NAME) {
            return !name.starts_with(b"nn.Module: ");
        }
        if !rest.starts_with(b"\"python_function\"") && !rest.starts_with(b"\"ac2g\"") {
            return false;
        }
    }
    let head = &buf[..buf.len().min(96)];
    let Some(i) = CAT.find(head) else {
        return false;
    };
    // The value after `"cat"`, `:` and optional spaces.
    let rest = &head[i + 5..];
    let rest = rest.strip_prefix(b":").unwrap_or(rest);
    let start = rest.iter().position(|&c| c != b' ').unwrap_or(rest.len());
    let value = &rest[start..];
    if value.starts_with(b"\"ac2g\"") {
        return true;
    }
    if value.starts_with(b"\"python_function\"") {
        return MODULE.find(&buf[..buf.len().min(192)]).is_none();
    }
    false
}
