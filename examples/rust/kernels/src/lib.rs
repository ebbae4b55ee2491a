//! Small on-device ML kernels: the reference versions a port is compared against.

pub mod activation;

/// Dot product of two int8 vectors, accumulated in i32 (as a quantized layer does).
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len(), "dot_i8: vectors of different lengths");
    a.iter().zip(b).map(|(&x, &y)| i32::from(x) * i32::from(y)).sum()
}

/// C = A (m x k) * B (k x n), int8 inputs with zero points, i32 accumulators, row-major.
pub fn gemm_i8(m: usize, n: usize, k: usize, a: &[i8], a_zero: i32, b: &[i8], b_zero: i32, c: &mut [i32]) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n, "gemm_i8: buffer too small");
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0i32;
            for p in 0..k {
                acc += (i32::from(a[i * k + p]) - a_zero) * (i32::from(b[p * n + j]) - b_zero);
            }
            c[i * n + j] = acc;
        }
    }
}

/// Scale an i32 accumulator to int8 by a fixed-point multiplier (Q31) and a right shift,
/// rounding to nearest, then add the output zero point and saturate.
pub fn requantize(acc: i32, multiplier: i32, shift: u32, out_zero: i32) -> i8 {
    let product = i64::from(acc) * i64::from(multiplier);
    let scaled = (product + (1i64 << 30)) >> 31; // Q31 multiply, rounded
    let shifted = if shift == 0 { scaled } else { (scaled + (1i64 << (shift - 1))) >> shift };
    (shifted + i64::from(out_zero)).clamp(i64::from(i8::MIN), i64::from(i8::MAX)) as i8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_product() {
        let a = [1i8, -2, 3, -4, 127, -128];
        let b = [5i8, 6, -7, 8, 1, 1];
        assert_eq!(dot_i8(&a, &b), 5 - 12 - 21 - 32 + 127 - 128);
    }

    #[test]
    fn dot_saturating_inputs() {
        let a = [-128i8; 64];
        assert_eq!(dot_i8(&a, &a), 64 * 128 * 128);
    }

    #[test]
    #[should_panic(expected = "different lengths")]
    fn dot_rejects_mismatched_lengths() {
        dot_i8(&[1, 2, 3], &[1, 2]);
    }

    #[test]
    fn gemm_identity() {
        let a = [1i8, 2, 3, 4]; // 2x2
        let eye = [1i8, 0, 0, 1];
        let mut c = [0i32; 4];
        gemm_i8(2, 2, 2, &a, 0, &eye, 0, &mut c);
        assert_eq!(c, [1, 2, 3, 4]);
    }

    #[test]
    fn gemm_zero_points() {
        // with zero points 1 and -1 the inputs are (a - 1) and (b + 1)
        let a = [2i8, 3]; // 1x2
        let b = [0i8, 1]; // 2x1
        let mut c = [0i32; 1];
        gemm_i8(1, 1, 2, &a, 1, &b, -1, &mut c);
        assert_eq!(c[0], 1 + 2 * 2);
    }

    #[test]
    fn requantize_rounds_and_saturates() {
        let half = 1 << 30; // 0.5 in Q31
        assert_eq!(requantize(10, half, 0, 0), 5);
        assert_eq!(requantize(11, half, 1, 0), 3); // 5.5 -> 6 (rounded), >> 1 -> 3
        assert_eq!(requantize(1000, half, 0, 0), 127);
        assert_eq!(requantize(-1000, half, 0, 3), -128);
    }

    #[test]
    #[ignore = "slow: a 256x256x256 GEMM against a float reference"]
    fn gemm_large_matches_float() {
        let (m, n, k) = (256, 256, 256);
        let a: Vec<i8> = (0..m * k).map(|i| (i % 251) as i8).collect();
        let b: Vec<i8> = (0..k * n).map(|i| (i % 241) as i8).collect();
        let mut c = vec![0i32; m * n];
        gemm_i8(m, n, k, &a, 0, &b, 0, &mut c);
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j])).sum();
                assert_eq!(f64::from(c[i * n + j]), want);
            }
        }
    }
}
