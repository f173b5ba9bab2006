use super::*;

/// An mm whose shapes give 5.4e19 FLOPs (past 2^64) counts the largest count, never a
/// wrapped small one (it printed 17,106.51 P).
#[test]
fn flops_past_two_to_the_64_saturate_instead_of_wrapping() {
    let arg = |dims: Vec<i64>| Arg {
        dims,
        ..Arg::default()
    };
    let f = op_flops(
        "aten::mm",
        &[
            arg(vec![3_000_000, 3_000_000]),
            arg(vec![3_000_000, 3_000_000]),
        ],
        None,
    )
    .unwrap();
    assert_eq!(f.matmul, u64::MAX);
    let conv = conv_out_shape(
        &[1, 1, i64::MAX],
        &[1, 1, 3],
        &ConvParams {
            stride: vec![i64::MAX],
            transposed: true,
            ..ConvParams::default()
        },
    );
    assert_eq!(conv[2], i64::MAX);
}

fn arg(dims: &[i64], ty: &str, concrete: &str) -> Arg {
    Arg {
        dims: dims.to_vec(),
        ty: ty.into(),
        concrete: concrete.into(),
    }
}

#[test]
fn matmul_family() {
    let f = op_flops(
        "aten::mm",
        &[arg(&[512, 512], "float", ""), arg(&[512, 256], "float", "")],
        None,
    )
    .unwrap();
    assert_eq!(f.matmul, 2 * 512 * 512 * 256);
    let f = op_flops(
        "aten::addmm",
        &[
            arg(&[10], "float", ""),
            arg(&[8, 512], "float", ""),
            arg(&[512, 10], "float", ""),
        ],
        None,
    )
    .unwrap();
    assert_eq!(f.matmul, 2 * 8 * 512 * 10);
    let f = op_flops(
        "aten::bmm",
        &[arg(&[4, 3, 5], "float", ""), arg(&[4, 5, 7], "float", "")],
        None,
    )
    .unwrap();
    assert_eq!(f.matmul, 2 * 4 * 3 * 5 * 7);
    assert!(
        op_flops("aten::linear", &[], None).is_none(),
        "composite: defers to its children"
    );
    assert!(op_flops("aten::conv2d", &[], None).is_none());
}

#[test]
fn convolution_forward_and_backward() {
    // ResNet stem: 8x3x64x64, 64x3x7x7, stride 2, padding 3 -> 8x64x32x32.
    let args = [
        arg(&[8, 3, 64, 64], "float", ""),
        arg(&[64, 3, 7, 7], "float", ""),
        arg(&[], "", ""),
        arg(&[], "ScalarList", "[2, 2]"),
        arg(&[], "ScalarList", "[3, 3]"),
        arg(&[], "ScalarList", "[1, 1]"),
        arg(&[], "Scalar", "False"),
        arg(&[], "ScalarList", "[0, 0]"),
        arg(&[], "Scalar", "1"),
    ];
    let f = op_flops("aten::convolution", &args, None).unwrap();
    assert_eq!(f.matmul, 2 * 8 * 32 * 32 * 64 * 3 * 7 * 7);
    let p = ConvParams {
        stride: vec![2, 2],
        padding: vec![3, 3],
        dilation: vec![1, 1],
        groups: 1,
        ..Default::default()
    };
    assert_eq!(
        conv_out_shape(&[8, 3, 64, 64], &[64, 3, 7, 7], &p),
        vec![8, 64, 32, 32]
    );
    // Backward of a 3x3 conv, both gradients: twice the forward.
    let mut b = vec![
        arg(&[8, 512, 2, 2], "float", ""),
        arg(&[8, 512, 2, 2], "float", ""),
        arg(&[512, 512, 3, 3], "float", ""),
    ];
    for c in [
        "[0]",
        "[1, 1]",
        "[1, 1]",
        "[1, 1]",
        "False",
        "[0, 0]",
        "1",
        "[True, True, False]",
    ] {
        b.push(arg(&[], "ScalarList", c));
    }
    let fwd = 2 * 8 * 2 * 2 * 512 * 512 * 9;
    assert_eq!(
        op_flops("aten::convolution_backward", &b, None)
            .unwrap()
            .matmul,
        2 * fwd
    );
    b[10] = arg(&[], "ScalarList", "[False, True, False]");
    assert_eq!(
        op_flops("aten::convolution_backward", &b, None)
            .unwrap()
            .matmul,
        fwd
    );
    // Grouped and transposed shapes.
    let t = ConvParams {
        stride: vec![2, 2],
        padding: vec![1, 1],
        dilation: vec![1, 1],
        transposed: true,
        output_padding: vec![1, 1],
        groups: 2,
    };
    assert_eq!(
        conv_out_shape(&[1, 4, 5, 5], &[4, 2, 3, 3], &t),
        vec![1, 4, 10, 10]
    );
}

#[test]
fn attention_forward_and_backward() {
    let q = arg(&[4, 4, 128, 64], "c10::BFloat16", "");
    let f = op_flops(
        "aten::_scaled_dot_product_cudnn_attention",
        &[q.clone(), q.clone(), q.clone()],
        None,
    )
    .unwrap();
    assert_eq!(f.matmul, 2 * 4 * 4 * 128 * 128 * (64 + 64));
    let b = op_flops(
        "aten::_scaled_dot_product_cudnn_attention_backward",
        &[q.clone(), q.clone(), q.clone(), q],
        None,
    )
    .unwrap();
    assert_eq!(b.matmul, 2 * 4 * 4 * 128 * 128 * (3 * 64 + 2 * 64));
}

#[test]
fn other_ops_count_only_in_all() {
    let f = op_flops(
        "aten::gelu",
        &[arg(&[4, 128, 1024], "c10::BFloat16", "")],
        None,
    )
    .unwrap();
    assert_eq!((f.matmul, f.all), (0, 4 * 128 * 1024));
    let f = op_flops("aten::_log_softmax", &[arg(&[512, 512], "float", "")], None).unwrap();
    assert_eq!((f.matmul, f.all), (0, 5 * 512 * 512));
    assert_eq!(
        op_flops("aten::view", &[arg(&[8, 8], "float", "")], None).unwrap(),
        OpFlops::default()
    );
}
