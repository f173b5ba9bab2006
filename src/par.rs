//! Small parallel helpers shared by the stages.

use rayon::prelude::*;

/// The parts joined in order into one new vector, each part moved on its own thread (the parts
/// are left empty). Joining tables of a few hundred thousand rows on one thread, with the fresh
/// pages faulted in, was a serial step between parallel ones.
pub(crate) fn concat<T: Send>(parts: &mut [Vec<T>]) -> Vec<T> {
    let total: usize = parts.iter().map(Vec::len).sum();
    let mut out: Vec<T> = Vec::with_capacity(total);
    let mut rest = &mut out.spare_capacity_mut()[..total];
    let mut dsts = Vec::with_capacity(parts.len());
    for p in parts.iter() {
        let (dst, tail) = rest.split_at_mut(p.len());
        dsts.push(dst);
        rest = tail;
    }
    dsts.into_par_iter()
        .zip(parts.par_iter_mut())
        .for_each(|(dst, src)| {
            for (d, s) in dst.iter_mut().zip(src.drain(..)) {
                d.write(s);
            }
        });
    // SAFETY: the parts' lengths sum to `total`, the destinations split `0..total` among them
    // without gaps, and each destination slot was written with its part's item above (`drain`
    // yields exactly `len` items, moved out so none is dropped twice).
    unsafe { out.set_len(total) };
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn concat_keeps_order_and_empties_the_parts() {
        let mut parts = vec![
            vec![String::from("a"), "b".into()],
            vec![],
            vec!["c".into()],
        ];
        assert_eq!(super::concat(&mut parts), ["a", "b", "c"]);
        assert!(parts.iter().all(Vec::is_empty));
    }
}
