//! Two snapshots compared: what grew at the peak, by kind of code, frame and stack.

use super::*;

/// What a site row of a snapshot's peak is by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteBy {
    /// The kind of code (`kind`: autograd, optimizer, ...).
    Kind,
    /// The innermost Python frame of the user's code.
    PythonFrame,
    /// The innermost C++ frame.
    CppFrame,
    /// The whole stack (a flame-graph line).
    Stack,
}

impl SiteBy {
    /// As the files write it.
    pub fn as_str(self) -> &'static str {
        match self {
            SiteBy::Kind => "kind",
            SiteBy::PythonFrame => "python_frame",
            SiteBy::CppFrame => "cpp_frame",
            SiteBy::Stack => "stack",
        }
    }
}

/// One row of a comparison of two snapshots: bytes alive at each one's peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Growth {
    /// Device.
    pub device: i64,
    /// What the site is.
    pub by: SiteBy,
    /// The kind, frame or flame-graph line.
    pub site: String,
    /// Bytes in the baseline.
    pub base_bytes: u64,
    /// Bytes in the other.
    pub bytes: u64,
}

impl Growth {
    /// What grew (negative: shrank).
    pub fn delta(&self) -> i64 {
        self.bytes as i64 - self.base_bytes as i64
    }
}

/// What grew at the peak from `base` to `other`, device by device (by index), as memory_viz's
/// `compare` asks: by kind of code, by Python frame, by C++ frame and by whole stack; most
/// growth first, then most shrinkage, unchanged rows left out.
pub fn compare(base: &SnapshotAnalysis, other: &SnapshotAnalysis) -> Vec<Growth> {
    let mut rows = Vec::new();
    for d in &other.devices {
        let b = base.devices.iter().find(|x| x.device == d.device);
        let mut add = |by: SiteBy, x: Vec<(String, u64)>, y: Vec<(String, u64)>| {
            let mut m: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
            for (k, v) in x {
                m.entry(k).or_default().0 += v;
            }
            for (k, v) in y {
                m.entry(k).or_default().1 += v;
            }
            let mut v: Vec<Growth> = m
                .into_iter()
                .filter(|(_, (a, b))| a != b)
                .map(|(site, (base_bytes, bytes))| Growth {
                    device: d.device,
                    by,
                    site,
                    base_bytes,
                    bytes,
                })
                .collect();
            v.sort_by(|a, b| b.delta().cmp(&a.delta()).then_with(|| a.site.cmp(&b.site)));
            rows.extend(v);
        };
        let kinds = |p: Option<&Peak>| -> Vec<(String, u64)> {
            p.map(|p| {
                p.by_kind
                    .iter()
                    .map(|k| (k.kind.name().to_owned(), k.bytes))
                    .collect()
            })
            .unwrap_or_default()
        };
        let sites = |v: Option<&Vec<Site>>| -> Vec<(String, u64)> {
            v.map(|v| v.iter().map(|s| (s.site.clone(), s.bytes)).collect())
                .unwrap_or_default()
        };
        let bp = b.map(|b| &b.peak);
        add(SiteBy::Kind, kinds(bp), kinds(Some(&d.peak)));
        add(
            SiteBy::PythonFrame,
            sites(bp.map(|p| &p.by_python_frame)),
            sites(Some(&d.peak.by_python_frame)),
        );
        add(
            SiteBy::CppFrame,
            sites(bp.map(|p| &p.by_cpp_frame)),
            sites(Some(&d.peak.by_cpp_frame)),
        );
        add(
            SiteBy::Stack,
            bp.map(|p| p.stacks.clone()).unwrap_or_default(),
            d.peak.stacks.clone(),
        );
    }
    rows
}
