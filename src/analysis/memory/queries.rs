//! Questions asked of the memory model: the breakdown at a time or by a key, a node's categories.

use super::*;

impl Memory {
    /// Bytes by category alive at `ts` (trace ns), given the allocator's total then: what the
    /// blocks do not explain is OTHER, so the parts always add up to `total`.
    pub fn breakdown_at(&self, ts: i64, total: i64) -> Breakdown {
        let mut b = [0i64; CATEGORY_COUNT];
        for blk in &self.blocks {
            if blk.alloc <= ts && blk.free.is_none_or(|f| f > ts) {
                b[blk.category.index()] += blk.size;
            }
        }
        let known: i64 = b.iter().sum();
        b[Category::Other.index()] += total - known;
        b
    }

    /// [`Memory::breakdown_at`] keyed by each category's summary name.
    pub fn breakdown_by_key(
        &self,
        ts: i64,
        total: i64,
    ) -> std::collections::BTreeMap<Category, i64> {
        CATEGORIES
            .iter()
            .zip(self.breakdown_at(ts, total))
            .map(|(c, b)| (*c, b))
            .collect()
    }

    /// For every node (index into `step.nodes`, `n` of them): the category holding most of the
    /// bytes it allocated; OTHER when it allocated nothing. One pass over the blocks.
    pub fn node_categories(&self, n: usize) -> Vec<Category> {
        let mut bytes: Vec<Breakdown> = vec![[0; CATEGORY_COUNT]; n];
        for b in &self.blocks {
            if let Some(p) = b.producer.filter(|&p| p < n) {
                bytes[p][b.category.index()] += b.size;
            }
        }
        bytes
            .iter()
            .map(|by| {
                // Most bytes; ties go to the category listed first.
                let mut best: Option<(i64, Category)> = None;
                for (i, &v) in by.iter().enumerate() {
                    if v > 0 && best.is_none_or(|(bv, _)| v > bv) {
                        best = Some((v, CATEGORIES[i]));
                    }
                }
                best.map_or(Category::Other, |(_, c)| c)
            })
            .collect()
    }
}
