//! Activations on int8 and float tensors.

/// ReLU in place on int8 values with a zero point: below the zero point becomes it.
pub fn relu_i8(x: &mut [i8], zero: i8) {
    for v in x {
        *v = (*v).max(zero);
    }
}

/// Numerically stable softmax: subtract the maximum before exponentiating.
pub fn softmax(x: &[f32], out: &mut [f32]) {
    assert_eq!(x.len(), out.len());
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v - max).exp();
        sum += *o;
    }
    for o in out.iter_mut() {
        *o /= sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relu_clamps_below_zero_point() {
        let mut x = [-5i8, -1, 0, 3, 127];
        relu_i8(&mut x, -1);
        assert_eq!(x, [-1, -1, 0, 3, 127]);
    }

    #[test]
    fn softmax_sums_to_one() {
        let x = [1.0f32, 2.0, 3.0, 1000.0];
        let mut out = [0.0f32; 4];
        softmax(&x, &mut out);
        let sum: f32 = out.iter().sum();
        assert!((sum - 1.0).abs() < 1e-6, "sum {sum}");
        assert!(out[3] > 0.99);
    }
}
