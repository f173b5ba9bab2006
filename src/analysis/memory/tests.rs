//! Unit tests of the memory rules.

use super::*;

fn pre_block(size: i64, category: Category, free: Option<i64>) -> Block {
    Block {
        addr: 0,
        size,
        alloc: i64::MIN,
        free,
        category,
        producer: None,
        freer: None,
        iteration: None,
    }
}

// Blocks made while the history was paused have no stack; gradients and
// optimizer moments among them are named by their parameters' requested sizes.
#[test]
fn stackless_blocks_are_gradients_then_moments_by_their_parameters_requested_sizes() {
    use Category::*;
    let mut pre = vec![
        pre_block(2048, Param, None),
        pre_block(1024, Param, None), // a buffer: no gradient, no moments
        pre_block(1024, Param, None),
        pre_block(2048, Grad, Some(5)), // freed by zero_grad: a gradient
        pre_block(1024, Grad, Some(6)),
        pre_block(1024, Grad, None), // lives on while gradients die: not one
        pre_block(1024, Grad, None),
        pre_block(3072, Grad, None), // asked for 2048, got a larger block
        pre_block(2048, Grad, None),
        pre_block(1024, Grad, None), // a third moment for 1024... still allowed (2 params)
        pre_block(32 << 20, Grad, None), // no parameter this size: left for the workspace rule
    ];
    let requested = [
        2048,
        1024,
        1024,
        2048,
        1024,
        1024,
        1024,
        2048,
        2048,
        1024,
        32 << 20,
    ];
    let stackless: Vec<(bool, i64)> = requested
        .iter()
        .enumerate()
        .map(|(i, &r)| (i >= 3, r))
        .collect();
    name_stackless(&mut pre, &stackless);
    let got: Vec<Category> = pre.iter().map(|b| b.category).collect();
    assert_eq!(
        got,
        [
            Param, Param, Param, Grad, Grad, OptState, OptState, OptState, OptState, OptState,
            Other
        ]
    );
}

#[test]
fn replay_pairs_frees_with_the_latest_allocation_at_their_address() {
    let events = [
        (0x10, 512),  // 0: block 0
        (0x20, -512), // 1: made before the window
        (0x10, 1024), // 2: block 1 at the same address; block 0 is never freed
        (0x10, -1024),
        (0x10, 0), // 4: nothing open at 0x10 any more: an early free
        (0x30, 512),
    ];
    let r = replay(&events);
    assert_eq!(r.blocks, [(0, None), (2, Some(3)), (5, None)]);
    assert_eq!(
        r.event_block,
        [Some(0), None, Some(1), Some(1), None, Some(2)]
    );
    assert_eq!(r.early_frees, [1, 4]);
}
