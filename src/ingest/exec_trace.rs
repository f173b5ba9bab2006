//! Execution Trace JSON (`torch.profiler.ExecutionTraceObserver`): one node per recorded op
//! with the identities of the tensors it reads and writes. Joined to the Kineto trace by
//! `rf_id` = `Record function id`.

use std::borrow::Cow;
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{source, Error};
use crate::diagnostics::Diagnostics;
use crate::intern::Interner;

pub use crate::model::tables::exec_trace::*;

#[derive(Deserialize)]
struct RawEt<'a> {
    #[serde(default)]
    schema: Option<String>,
    #[serde(borrow)]
    nodes: Vec<RawNode<'a>>,
}

#[derive(Deserialize)]
struct RawNode<'a> {
    id: i64,
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    ctrl_deps: Option<i64>,
    #[serde(default, borrow)]
    inputs: Option<RawIo<'a>>,
    #[serde(default, borrow)]
    outputs: Option<RawIo<'a>>,
    #[serde(default, borrow)]
    attrs: Vec<RawAttr<'a>>,
}

#[derive(Deserialize)]
struct RawIo<'a> {
    #[serde(default, borrow)]
    values: Vec<&'a RawValue>,
    #[serde(default, borrow)]
    types: Vec<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct RawAttr<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    value: &'a RawValue,
}

/// Reads an Execution Trace (`.json` or gzip).
pub fn load(path: &Path, diag: &mut Diagnostics) -> Result<ExecTrace, Error> {
    let src = source::read_expecting(path, source::Expect::JsonObject)?;
    if src.truncated_gzip {
        diag.warn(
            "truncated_exec_trace",
            format!("{}: gzip stream ends early", path.display()),
        );
    }
    from_bytes(path, &src.bytes)
}

/// Parses Execution Trace JSON text.
pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<ExecTrace, Error> {
    let raw: RawEt = serde_json::from_slice(bytes).map_err(|e| Error::Format {
        path: path.to_path_buf(),
        what: format!("not an Execution Trace (expected an object with \"nodes\"): {e}"),
    })?;
    let mut strings = Interner::new();
    let mut nodes = Vec::with_capacity(raw.nodes.len());
    for n in raw.nodes {
        let mut rf_id = None;
        let mut seq_id = None;
        let mut tid = None;
        for a in &n.attrs {
            let v = || serde_json::from_str::<i64>(a.value.get()).ok();
            match &*a.name {
                "rf_id" => rf_id = v(),
                "seq_id" => seq_id = v(),
                "tid" => tid = v(),
                _ => {}
            }
        }
        let inputs = n
            .inputs
            .map(|io| tensors(&io, &mut strings))
            .unwrap_or_default();
        let outputs = n
            .outputs
            .map(|io| tensors(&io, &mut strings))
            .unwrap_or_default();
        nodes.push(ExecNode {
            id: n.id,
            name: strings.intern(&n.name),
            parent: n.ctrl_deps,
            rf_id,
            seq_id,
            tid,
            inputs,
            outputs,
        });
    }
    let by_rf = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| Some((n.rf_id?, i as u32)))
        .collect();
    Ok(ExecTrace {
        path: path.to_path_buf(),
        schema: raw.schema.unwrap_or_default(),
        strings,
        nodes,
        by_rf,
    })
}

fn tensors(io: &RawIo<'_>, strings: &mut Interner) -> Vec<TensorRef> {
    let mut out = Vec::new();
    for (i, v) in io.values.iter().enumerate() {
        let ty = io.types.get(i).map(|t| &**t).unwrap_or("");
        if ty.starts_with("Tensor") {
            if let Some(t) = tensor(v.get(), strings) {
                out.push(t);
            }
        } else if ty.contains("Tensor") {
            // A tensor list: a JSON array of tensor tuples.
            if let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(v.get()) {
                out.extend(items.iter().filter_map(|it| tensor(it.get(), strings)));
            }
        }
    }
    out
}

fn tensor(text: &str, strings: &mut Interner) -> Option<TensorRef> {
    let (a, b, c, d, e, dev): (i64, i64, i64, i64, i64, Cow<'_, str>) =
        serde_json::from_str(text).ok()?;
    Some(TensorRef {
        tensor_id: a,
        storage_id: b,
        offset: c,
        numel: d,
        itemsize: e,
        device: strings.intern(&dev),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tensor_identities() {
        let text = r#"{"schema":"1.1.1","nodes":[{"id":21,"name":"aten::conv2d","ctrl_deps":3,
          "inputs":{"values":[[10,11,0,98304,4,"cuda:0"],"<None>",[[1,2,0,4,4,"cuda:0"],[3,4,0,4,2,"cuda:0"]]],
                    "types":["Tensor(float)","None","GenericList[Tensor(float),Tensor(float)]"]},
          "outputs":{"values":[[28,29,0,524288,4,"cuda:0"]],"types":["Tensor(float)"]},
          "attrs":[{"name":"rf_id","type":"uint64","value":11},{"name":"seq_id","type":"int64","value":216}]}]}"#;
        let et = from_bytes(Path::new("et.json"), text.as_bytes()).unwrap();
        let n = &et.nodes[0];
        assert_eq!(n.rf_id, Some(11));
        assert_eq!(n.seq_id, Some(216));
        assert_eq!(n.inputs.len(), 3);
        assert_eq!(n.inputs[2].itemsize, 2);
        assert_eq!(n.outputs[0].tensor_id, 28);
        assert_eq!(et.strings.resolve(n.outputs[0].device), "cuda:0");
        assert!(from_bytes(Path::new("x"), b"{\"traceEvents\":[]}").is_err());
    }
}
