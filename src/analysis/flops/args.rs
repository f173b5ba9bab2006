//! An op's recorded inputs (`Input Dims`, `Input type`, `Concrete Inputs` of a Kineto
//! `cpu_op`) read into shapes, types and scalar texts: the FLOP formulas' arguments. Kineto
//! writes plain lists, read here without building JSON values (this was most of the FLOP
//! analysis's time); anything else goes through serde_json, and tests hold the two readers to
//! the same result on every op of every sample.

/// One input as recorded: its shape(s) and scalar value text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Arg {
    /// Shape, for a tensor.
    pub dims: Vec<i64>,
    /// `Input type`.
    pub ty: String,
    /// `Concrete Inputs` text (scalars and scalar lists).
    pub concrete: String,
}

impl Arg {
    pub(crate) fn numel(&self) -> u64 {
        super::formulas::sat(self.dims.iter().map(|&d| d.max(0) as u64))
    }
    pub(crate) fn ints(&self) -> Vec<i64> {
        self.concrete
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .filter_map(|x| x.trim().parse().ok())
            .collect()
    }
    pub(crate) fn bools(&self) -> Vec<bool> {
        self.concrete
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .map(|x| x.trim() == "True")
            .collect()
    }
}

/// Parses an op's recorded inputs.
pub fn parse_args(dims: Option<&str>, types: Option<&str>, concrete: Option<&str>) -> Vec<Arg> {
    plain_args(dims, types, concrete).unwrap_or_else(|| parse_args_json(dims, types, concrete))
}

/// The elements of a JSON array's text, as texts, when it is a plain array: no string with an
/// escape in it. `None` for anything else (the JSON parser then decides).
fn plain_elements(text: &str) -> Option<Vec<&str>> {
    let t = json_trim(text).strip_prefix('[')?.strip_suffix(']')?;
    let b = t.as_bytes();
    let mut out = Vec::new();
    if json_trim(t).is_empty() {
        return Some(out);
    }
    let (mut depth, mut start, mut in_str) = (0usize, 0usize, false);
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'\\' | 0..0x20 if in_str => return None,
            b'"' => in_str = !in_str,
            _ if in_str => {}
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth = depth.checked_sub(1)?,
            b',' if depth == 0 => {
                out.push(json_trim(&t[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    if in_str || depth != 0 {
        return None;
    }
    out.push(json_trim(&t[start..]));
    Some(out)
}

fn json_trim(s: &str) -> &str {
    s.trim_matches([' ', '\t', '\n', '\r'])
}

/// A plain JSON string's content.
fn plain_string(text: &str) -> Option<&str> {
    let s = text.strip_prefix('"')?.strip_suffix('"')?;
    (!s.contains('"')).then_some(s)
}

/// Checks a (nested) list of plain integers.
fn plain_int_lists(text: &str) -> Option<()> {
    for x in plain_elements(text)? {
        if x.starts_with('[') {
            plain_int_lists(x)?;
        } else {
            plain_int(x)?;
        }
    }
    Some(())
}

/// An integer as JSON writes it (no `+`, no leading zeros).
fn plain_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let ok = match digits.as_bytes() {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    ok.then(|| text.parse().ok()).flatten()
}

/// [`parse_args`] for the plain texts Kineto writes (lists of integer lists, of strings),
/// without building JSON values: this was most of the FLOP analysis's time. `None` when the
/// texts are anything else; [`parse_args_json`] reads those, and a test checks the two agree.
fn plain_args(dims: Option<&str>, types: Option<&str>, concrete: Option<&str>) -> Option<Vec<Arg>> {
    fn list(t: Option<&str>) -> Option<Vec<&str>> {
        t.map_or(Some(Vec::new()), plain_elements)
    }
    let (dims, types, conc) = (list(dims)?, list(types)?, list(concrete)?);
    if !conc.iter().chain(&types).all(|c| plain_string(c).is_some()) {
        return None;
    }
    let n = dims.len().max(types.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let d = match dims.get(i) {
            Some(d) if d.starts_with('[') => {
                // A tensor list's entry is a list of shapes: JSON reading keeps only the
                // integers at the top, so nested lists are checked and passed over.
                let mut v = Vec::new();
                for x in plain_elements(d)? {
                    if x.starts_with('[') {
                        plain_int_lists(x)?;
                    } else {
                        v.push(plain_int(x)?);
                    }
                }
                v
            }
            Some(_) => return None,
            None => Vec::new(),
        };
        let ty = match types.get(i) {
            Some(t) => plain_string(t)?.to_string(),
            None => String::new(),
        };
        let concrete = match conc.get(i) {
            Some(c) => plain_string(c)?.to_string(),
            None => String::new(),
        };
        out.push(Arg {
            dims: d,
            ty,
            concrete,
        });
    }
    Some(out)
}

/// [`parse_args`] through JSON values: any text serde_json reads.
fn parse_args_json(dims: Option<&str>, types: Option<&str>, concrete: Option<&str>) -> Vec<Arg> {
    let dims: Vec<serde_json::Value> = dims
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_default();
    let types: Vec<String> = types
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_default();
    let conc: Vec<serde_json::Value> = concrete
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_default();
    let n = dims.len().max(types.len());
    (0..n)
        .map(|i| Arg {
            dims: dims
                .get(i)
                .and_then(|v| v.as_array())
                .map(|a| a.iter().filter_map(|x| x.as_i64()).collect())
                .unwrap_or_default(),
            ty: types.get(i).cloned().unwrap_or_default(),
            concrete: match conc.get(i) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_json_argument_readers_agree_on_every_sample_op() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces");
        let mut checked = 0;
        for dir in std::fs::read_dir(&root).unwrap() {
            let dir = dir.unwrap().path();
            let Some(trace) = ["trace.json.gz", "trace_rank0.json.gz"]
                .iter()
                .map(|f| dir.join(f))
                .find(|p| p.exists())
            else {
                continue;
            };
            let mut d = crate::diagnostics::Diagnostics::default();
            let k = crate::model::kineto_load(&trace, &mut d).unwrap();
            for op in &k.ops {
                let i = k.inputs(op);
                if i.dims.is_none() && i.types.is_none() {
                    continue;
                }
                let plain = plain_args(i.dims, i.types, i.concrete);
                assert!(plain.is_some(), "{:?}", i);
                assert_eq!(plain.unwrap(), parse_args_json(i.dims, i.types, i.concrete));
                checked += 1;
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    #[test]
    fn plain_and_json_argument_readers_agree() {
        let cases: &[[Option<&str>; 3]] = &[
            [
                Some("[[], [8, 10], [8]]"),
                Some(r#"["float", "long int", "Scalar"]"#),
                Some(r#"["", "", "1"]"#),
            ],
            [Some("[[2,3],[3,4]]"), None, None],
            [
                Some("[[1, 2], []]"),
                Some(r#"["float", "float"]"#),
                Some(r#"["", "[1, 2]", "extra"]"#),
            ],
            [Some("[[[1, 2], [3]]]"), Some(r#"["TensorList"]"#), None],
            [Some("[[[1, 2], [3,]]]"), Some(r#"["TensorList"]"#), None],
            [Some("[[[1, 2], 7]]"), None, None],
            [Some("[[1.5]]"), None, None],
            [Some("[[01]]"), None, None],
            [Some("[[1],]"), None, None],
            [Some("[null]"), Some("[null]"), None],
            [Some("[[1]]"), Some(r#"["a\"b"]"#), None],
            [
                Some("[[1]]"),
                Some(r#"["float"]"#),
                Some(r#"["1", garbage]"#),
            ],
            [Some("[[1]"), Some(r#"["float"]"#), None],
            [
                Some(" [ [ 1 , -2 ] ] "),
                Some(r#"[ "float" ]"#),
                Some(r#"[ "" ]"#),
            ],
            [None, Some(r#"["float", "int"]"#), Some(r#"[1, "x"]"#)],
        ];
        for [d, t, c] in cases {
            assert_eq!(
                parse_args(*d, *t, *c),
                parse_args_json(*d, *t, *c),
                "{d:?} {t:?} {c:?}"
            );
        }
        assert!(plain_args(Some("[[], [8, 10]]"), Some(r#"["float", "float"]"#), None).is_some());
    }

    #[test]
    fn parses_recorded_inputs() {
        let a = parse_args(
            Some("[[8, 3], [], [[1, 2], [3]]]"),
            Some(r#"["float", "ScalarList", "TensorList"]"#),
            Some(r#"["", "[2, 2]", ""]"#),
        );
        assert_eq!(a[0].dims, vec![8, 3]);
        assert_eq!(a[1].ints(), vec![2, 2]);
        assert_eq!(a[2].ty, "TensorList");
    }
}
