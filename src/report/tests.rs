use super::*;

#[test]
fn formats() {
    assert_eq!(secs(0.000123456789), "0.000123457");
    assert_eq!(secs(2.0), "2");
    assert_eq!(secs(0.0), "0");
    assert_eq!(human_bytes(512), "512 B");
    assert_eq!(human_bytes(296840192), "283.1 MiB");
    assert_eq!(human_time(0.0647), "64.700 ms");
    assert_eq!(truncate("abcdef", 4), "…def");
    // Node names keep their phase and op, the module path elided from the front.
    let name = "backward:LightningTransformer_0/Transformer_0/Linear_8/aten::mm#1";
    assert_eq!(truncate(name, 40), "backward:…/Linear_8/aten::mm#1");
    assert_eq!(truncate(name, 26), "backward:…/aten::mm#1");
    assert_eq!(truncate(name, 80), name);
    // An op too long to keep with its phase: the last characters, as for any text.
    assert_eq!(
        truncate("forward:M_0/aten::a_very_long_op_name#0", 12),
        "…g_op_name#0"
    );
}
