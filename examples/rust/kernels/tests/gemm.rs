//! The public GEMM against a naive float reference, as a user of the crate calls it.

use ondevice_kernels::{gemm_i8, requantize};

fn reference(m: usize, n: usize, k: usize, a: &[i8], b: &[i8]) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| f32::from(a[i * k + p]) * f32::from(b[p * n + j])).sum();
        }
    }
    c
}

#[test]
fn gemm_matches_float_reference() {
    let (m, n, k) = (4, 3, 5);
    let a: Vec<i8> = (0..m * k).map(|i| (i as i8).wrapping_mul(37)).collect();
    let b: Vec<i8> = (0..k * n).map(|i| (i as i8).wrapping_mul(-29)).collect();
    let mut c = vec![0i32; m * n];
    gemm_i8(m, n, k, &a, 0, &b, 0, &mut c);
    let want = reference(m, n, k, &a, &b);
    for (got, want) in c.iter().zip(&want) {
        assert_eq!(*got as f32, *want);
    }
}

#[test]
fn gemm_then_requantize() {
    let a = [10i8, 20, 30, 40];
    let b = [1i8, 1, 1, 1];
    let mut c = [0i32; 4];
    gemm_i8(2, 2, 2, &a, 0, &b, 0, &mut c);
    let q: Vec<i8> = c.iter().map(|&v| requantize(v, 1 << 30, 0, 0)).collect();
    assert_eq!(q, [15, 15, 35, 35]);
}
