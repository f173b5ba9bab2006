//! Axis tick labels.

use super::tick;

#[test]
fn axis_ticks_read_as_written_numbers() {
    assert_eq!(tick(&50.0), "50");
    assert_eq!(tick(&0.0), "0");
    assert_eq!(tick(&2.5), "2.5");
    assert_eq!(tick(&0.001), "0.001");
    // A log axis's tick as floating point leaves it.
    assert_eq!(tick(&9.999999999999999e-6), "1e-5");
    assert_eq!(tick(&1e-6), "1e-6");
}
