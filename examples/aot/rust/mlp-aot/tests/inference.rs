//! The compiled model against the outputs TensorFlow computed for the same inputs.

mod golden;

#[test]
fn matches_tensorflow_on_the_golden_inputs() {
    for (x, want) in golden::GOLDEN_INPUT.iter().zip(golden::GOLDEN_OUTPUT.iter()) {
        let got = mlp_aot::infer(x).expect("mlp_run failed");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "logit {g} differs from TensorFlow's {w}");
        }
    }
}

#[test]
fn the_top_class_of_each_input_is_tensorflows() {
    for (x, want) in golden::GOLDEN_INPUT.iter().zip(golden::GOLDEN_OUTPUT.iter()) {
        let got = mlp_aot::infer(x).unwrap();
        let top = |v: &[f32]| (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap();
        assert_eq!(top(&got), top(want));
    }
}
