//! The load benchmark (placeholder while it is written).
fn main() {}
