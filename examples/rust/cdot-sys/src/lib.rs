//! Bindings to the C library `ondevice_cdot` and a safe wrapper, tested against a Rust
//! reference on the device the C code was built for.

use std::os::raw::c_uint;

extern "C" {
    fn ondevice_cdot_s8(a: *const i8, a_zero: i32, b: *const i8, b_zero: i32, n: usize) -> i32;
    fn ondevice_cdot_version() -> c_uint;
}

/// The C dot product of two equally long int8 vectors with zero points.
pub fn dot(a: &[i8], a_zero: i32, b: &[i8], b_zero: i32) -> i32 {
    assert_eq!(a.len(), b.len(), "dot: vectors of different lengths");
    // SAFETY: both pointers are valid for a.len() elements, which the C code only reads
    unsafe { ondevice_cdot_s8(a.as_ptr(), a_zero, b.as_ptr(), b_zero, a.len()) }
}

pub fn version() -> u32 {
    // SAFETY: no arguments, no state
    unsafe { ondevice_cdot_version() }
}

/// What the C code must compute.
pub fn reference(a: &[i8], a_zero: i32, b: &[i8], b_zero: i32) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| (i32::from(x) - a_zero) * (i32::from(y) - b_zero)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_the_c_library() {
        assert_eq!(version(), 1);
    }

    #[test]
    fn c_dot_matches_reference() {
        // lengths around the unrolled loop's step, so its tail is exercised too
        for n in 0..=9 {
            let a: Vec<i8> = (0..n).map(|i| (i as i8).wrapping_mul(53).wrapping_sub(7)).collect();
            let b: Vec<i8> = (0..n).map(|i| (i as i8).wrapping_mul(-31)).collect();
            assert_eq!(dot(&a, 3, &b, -5), reference(&a, 3, &b, -5), "n = {n}");
        }
    }

    #[test]
    fn c_dot_extremes() {
        let a = [i8::MIN; 1024];
        let b = [i8::MAX; 1024];
        assert_eq!(dot(&a, 0, &b, 0), 1024 * -128 * 127);
    }
}
