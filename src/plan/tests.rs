use super::*;

#[test]
fn issue20_budgets_parse_as_sizes_or_fractions() {
    assert_eq!("10GiB".parse::<Budget>().unwrap(), Budget::Bytes(10 << 30));
    assert_eq!(
        "9.5GB".parse::<Budget>().unwrap(),
        Budget::Bytes(9_500_000_000)
    );
    assert_eq!(
        "512 MiB".parse::<Budget>().unwrap(),
        Budget::Bytes(512 << 20)
    );
    assert_eq!("80%".parse::<Budget>().unwrap(), Budget::Fraction(0.8));
    assert_eq!("1234".parse::<Budget>().unwrap(), Budget::Bytes(1234));
    for bad in ["", "ten", "10XB", "-5GiB", "0", "%", "1e30GB"] {
        assert!(bad.parse::<Budget>().is_err(), "{bad}");
    }
}

#[test]
fn module_paths_nest_on_whole_names() {
    assert!(under("GPT_0/Block_1/MLP_1", "GPT_0/Block_1"));
    assert!(under("GPT_0/Block_1", "GPT_0/Block_1"));
    assert!(!under("GPT_0/Block_10", "GPT_0/Block_1"));
    let class_of = crate::model::module_class;
    assert_eq!(class_of("Block_10"), "Block");
    assert_eq!(class_of("Block"), "Block");
    assert_eq!(class_of("My_Net_2"), "My_Net");
}

#[test]
fn issue20_never_twice_sees_a_shared_block() {
    let c = |path: &str, blocks: Vec<usize>| Candidate {
        path: path.into(),
        instance: path.into(),
        fqn: None,
        class: "X".into(),
        depth: 0,
        added: vec![BTreeMap::new()],
        dropped_bytes: 0,
        dropped_blocks: vec![blocks],
        held: vec![Vec::new()],
        work: vec![BTreeMap::new()],
        composite: false,
    };
    let cands = [c("A", vec![1, 2]), c("B", vec![3]), c("C", vec![2])];
    assert!(!dropped_twice(
        &cands,
        &[(0, Action::Recompute), (1, Action::Recompute)]
    ));
    assert!(dropped_twice(
        &cands,
        &[(0, Action::Recompute), (2, Action::Swap)]
    ));
}
