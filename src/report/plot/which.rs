//! Which plots an analysis has: their names, as --plots takes them and their files are named.

/// A plot of one analysis (`--plots` names them; each is `plots/<name>.{svg,png}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Plot {
    /// Time per iteration by phase.
    TimeByPhase,
    /// Peak and active memory of each node in execution order.
    MemoryVsRank,
    /// Memory by category over the profiled time.
    MemoryOverTime,
    /// GPU time of each node.
    NodeRuntime,
    /// Activations' sizes and lifetimes.
    Activations,
    /// Memory at the peak by category.
    PeakBreakdown,
    /// FLOPs against bytes: the roofline.
    Roofline,
}

/// Every plot, in the order they are drawn and listed.
pub const PLOTS: [Plot; 7] = [
    Plot::TimeByPhase,
    Plot::MemoryVsRank,
    Plot::MemoryOverTime,
    Plot::NodeRuntime,
    Plot::Activations,
    Plot::PeakBreakdown,
    Plot::Roofline,
];

impl Plot {
    /// Its name: in `--plots`, and its files' stem.
    pub fn name(self) -> &'static str {
        match self {
            Plot::TimeByPhase => "time_by_phase",
            Plot::MemoryVsRank => "memory_vs_rank",
            Plot::MemoryOverTime => "memory_over_time",
            Plot::NodeRuntime => "node_runtime",
            Plot::Activations => "activations",
            Plot::PeakBreakdown => "peak_breakdown",
            Plot::Roofline => "roofline",
        }
    }

    /// The plot of that name.
    pub fn from_name(name: &str) -> Option<Plot> {
        PLOTS.into_iter().find(|p| p.name() == name)
    }
}

impl std::fmt::Display for Plot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
