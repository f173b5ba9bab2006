//! CSV output: the `csv` crate's writer for small tables, and our own row writer for the large
//! ones, formatted in blocks on all threads (a property test holds its quoting to the crate's).

use super::*;

/// A CSV writer on a [`create`]d file.
pub(crate) fn csv_writer(path: &Path) -> Result<CsvOut, Error> {
    Ok(CsvOut(csv::Writer::from_writer(create(path)?)))
}

/// A CSV writer whose every field goes through [`safe_cell`].
pub(crate) struct CsvOut(csv::Writer<File>);

impl CsvOut {
    /// Writes one record, each field made safe for spreadsheets.
    pub(crate) fn write_record<I, T>(&mut self, record: I) -> csv::Result<()>
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        for f in record {
            self.0.write_field(safe_cell(f.as_ref()))?;
        }
        self.0.write_record(None::<&[u8]>)
    }

    /// Flushes what is buffered.
    pub(crate) fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// A CSV cell that a spreadsheet would read as a formula (an op or label named
/// `=cmd|' /C calc'!A0`, `+SUM(1,2)` or `@HYPERLINK(...)`) gets a leading `'`, as OWASP
/// recommends: text starting with `=`, `@`, a tab or a carriage return, and text starting with
/// `+` or `-` that is not a number (a negative figure stays a number).
pub(crate) fn safe_cell(b: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let formula = match b.first() {
        Some(b'=' | b'@' | b'\t' | b'\r') => true,
        Some(b'+' | b'-') => {
            let t = std::str::from_utf8(b).unwrap_or("");
            let t = t.strip_suffix('%').unwrap_or(t);
            t.parse::<f64>().is_err()
        }
        _ => false,
    };
    if formula {
        let mut v = Vec::with_capacity(b.len() + 1);
        v.push(b'\'');
        v.extend_from_slice(b);
        std::borrow::Cow::Owned(v)
    } else {
        std::borrow::Cow::Borrowed(b)
    }
}

pub(crate) fn csv_err(path: &Path) -> impl Fn(csv::Error) -> Error + '_ {
    move |e| Error::from(FileError::new(path, e.into()))
}

/// CSV rows formatted into memory, with the quoting of the `csv` crate's default writer (a
/// field is quoted when it holds `,`, `"`, `\r` or `\n`, quotes doubled; a row of one empty
/// field is `""`), which a property test holds it to. The tables with a row per allocator event
/// or per node are the largest outputs: a `String` per field, and then the `csv` writer's
/// per-field state machine, were most of their cost.
pub(crate) struct Rows {
    buf: Vec<u8>,
    row_start: usize,
    fields: u32,
    int: itoa::Buffer,
}

impl Rows {
    pub(crate) fn new() -> Rows {
        Rows {
            buf: Vec::new(),
            row_start: 0,
            fields: 0,
            int: itoa::Buffer::new(),
        }
    }

    fn sep(&mut self) {
        if self.fields > 0 {
            self.buf.push(b',');
        }
        self.fields += 1;
    }

    /// An integer (itoa: `Display` through `fmt` was a tenth of writing the large tables).
    pub(crate) fn num(&mut self, v: impl itoa::Integer) -> &mut Self {
        self.sep();
        self.buf.extend_from_slice(self.int.format(v).as_bytes());
        self
    }

    /// Text, made safe for spreadsheets ([`safe_cell`]) and quoted as CSV needs.
    pub(crate) fn text(&mut self, s: &str) -> &mut Self {
        self.sep();
        let cell = safe_cell(s.as_bytes());
        let b: &[u8] = &cell;
        if b.iter().any(|&c| matches!(c, b',' | b'"' | b'\r' | b'\n')) {
            self.buf.push(b'"');
            for &c in b {
                if c == b'"' {
                    self.buf.push(b'"');
                }
                self.buf.push(c);
            }
            self.buf.push(b'"');
        } else {
            self.buf.extend_from_slice(b);
        }
        self
    }

    /// Nanoseconds as microseconds with three decimals, exactly (no float on the way).
    pub(crate) fn us(&mut self, ns: i64) -> &mut Self {
        self.sep();
        us_text(ns, &mut self.buf);
        self
    }

    /// Ends the row.
    pub(crate) fn end(&mut self) {
        // A row of one empty field would be an empty line, which readers skip.
        if self.fields == 1 && self.buf.len() == self.row_start {
            self.buf.extend_from_slice(b"\"\"");
        }
        self.buf.push(b'\n');
        self.row_start = self.buf.len();
        self.fields = 0;
    }

    /// The text so far.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// Writes a CSV table of one row per item. Rows are formatted in blocks on all threads and
/// written in item order, so the file does not depend on the threads.
pub(crate) fn write_table<T: Sync>(
    path: &Path,
    header: &[&str],
    items: &[T],
    row: impl Fn(&mut Rows, &T) + Sync,
) -> Result<(), Error> {
    use rayon::prelude::*;
    const BLOCK: usize = 4096;
    let mut head = Rows::new();
    for h in header {
        head.text(h);
    }
    head.end();
    let blocks: Vec<Rows> = items
        .par_chunks(BLOCK)
        .map(|c| {
            let mut r = Rows::new();
            r.buf.reserve(c.len() * 128);
            for x in c {
                row(&mut r, x);
            }
            r
        })
        .collect();
    let mut f = create(path)?;
    f.write_all(head.bytes()).map_err(io(path))?;
    for b in &blocks {
        f.write_all(b.bytes()).map_err(io(path))?;
    }
    Ok(())
}

/// `ns` as microseconds with three decimals: `-1` is `-0.001`.
pub(crate) fn us_text(ns: i64, out: &mut Vec<u8>) {
    let a = ns.unsigned_abs();
    if ns < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(itoa::Buffer::new().format(a / 1000).as_bytes());
    let r = a % 1000;
    out.extend_from_slice(&[
        b'.',
        b'0' + (r / 100) as u8,
        b'0' + (r / 10 % 10) as u8,
        b'0' + (r % 10) as u8,
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_are_written_exactly() {
        let text = |ns| {
            let mut v = Vec::new();
            us_text(ns, &mut v);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(text(4_451_161_997_283_098), "4451161997283.098");
        assert_eq!(text(0), "0.000");
        assert_eq!(text(7), "0.007");
        // Negative values keep their sign on the whole number (div_euclid gave "-1.999").
        assert_eq!(text(-1), "-0.001");
        assert_eq!(text(-1_500), "-1.500");
        assert_eq!(text(i64::MIN), "-9223372036854775.808");
    }

    /// Rows as the `csv` crate's default writer makes them, for the property test.
    fn csv_crate_text(rows: &[Vec<String>]) -> Vec<u8> {
        let mut w = csv::WriterBuilder::new()
            .flexible(true)
            .from_writer(Vec::new());
        for r in rows {
            w.write_record(r.iter().map(|f| safe_cell(f.as_bytes())))
                .unwrap();
        }
        w.into_inner().unwrap()
    }

    proptest::proptest! {
        #[test]
        fn rows_quote_as_the_csv_crate_does(
            rows in proptest::collection::vec(
                proptest::collection::vec("[a,\"\r\n #é0=+@\t.-]{0,6}", 1..5),
                0..6,
            )
        ) {
            let mut r = Rows::new();
            for row in &rows {
                for f in row {
                    r.text(f);
                }
                r.end();
            }
            proptest::prop_assert_eq!(r.bytes(), &csv_crate_text(&rows)[..]);
        }
    }

    /// The sample traces have fewer rows than a block, so the golden and thread-count tests
    /// never join several blocks: this table spans four.
    #[test]
    fn write_table_joins_blocks_in_row_order() {
        let items: Vec<i64> = (0..3 * 4096 + 5).map(|i| i * 7 - 100).collect();
        let path = std::env::temp_dir().join(format!("steptrace-rows-{}.csv", std::process::id()));
        write_table(&path, &["n", "label"], &items, |w, &v| {
            w.num(v).text(if v % 3 == 0 { "a,b" } else { "c" }).end();
        })
        .unwrap();
        let mut expected = Rows::new();
        expected.text("n").text("label").end();
        for &v in &items {
            expected
                .num(v)
                .text(if v % 3 == 0 { "a,b" } else { "c" })
                .end();
        }
        // Written under its part name until the run commits.
        let part = out_dir::part_path(&path);
        let written = std::fs::read(&part).unwrap();
        std::fs::remove_file(&part).unwrap();
        assert_eq!(written, expected.bytes());
    }

    #[test]
    fn issue22_cells_that_would_be_formulas_are_neutralised_and_numbers_kept() {
        let cell = |s: &str| String::from_utf8(safe_cell(s.as_bytes()).into_owned()).unwrap();
        for f in [
            "=cmd|' /C calc'!A0",
            "+SUM(1,2)",
            "@HYPERLINK(\"x\")",
            "-2+3",
            "\tx",
            "\r=1",
        ] {
            assert_eq!(cell(f), format!("'{f}"));
        }
        for keep in ["-1.5", "+2", "-12.5%", "aten::mm", "", "1e-3", "-"] {
            let want = if keep == "-" { "'-" } else { keep };
            assert_eq!(cell(keep), want);
        }
        let mut r = Rows::new();
        r.text("=1+1").text("-0.25").end();
        assert_eq!(r.bytes(), b"'=1+1,-0.25\n");
    }

    #[test]
    fn rows_mix_numbers_and_texts() {
        let mut r = Rows::new();
        r.num(-12i64).us(1_500).text("a,b").text("").end();
        r.text("").end();
        assert_eq!(r.bytes(), b"-12,1.500,\"a,b\",\n\"\"\n");
    }
}
