//! Minimal hand-written JNI and JVMTI bindings: only the functions the agent calls, looked up
//! by their slot in the function tables (a crate would add a large surface for ~30 calls).

pub mod jni;
pub mod jvmti;
