//! The MLP compiled ahead of time by XLA, called from Rust through the C entry that
//! pytest-ondevice generates (`mlp_model.h`): no interpreter, no runtime.

pub const INPUTS: usize = 64;
pub const OUTPUTS: usize = 10;

extern "C" {
    fn mlp_run(x: *const f32, logits: *mut f32) -> i32;
}

/// The model's logits for one input, or the C entry's error code (-1: a kernel failed,
/// -2: the weights are not the ones the kernels were compiled with).
pub fn infer(x: &[f32; INPUTS]) -> Result<[f32; OUTPUTS], i32> {
    let mut logits = [0f32; OUTPUTS];
    // SAFETY: x holds INPUTS floats, logits OUTPUTS, as mlp_model.h declares them
    let code = unsafe { mlp_run(x.as_ptr(), logits.as_mut_ptr()) };
    if code == 0 {
        Ok(logits)
    } else {
        Err(code)
    }
}
