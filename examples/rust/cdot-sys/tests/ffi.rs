//! The bindings as a user of the crate calls them.

#[test]
fn dot_of_unit_vectors() {
    let a = [1i8, 0, 0, 0, 0];
    let b = [9i8, 8, 7, 6, 5];
    assert_eq!(ondevice_cdot_sys::dot(&a, 0, &b, 0), 9);
}
