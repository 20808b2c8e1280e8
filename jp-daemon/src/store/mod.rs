//! The stores: what the collectors publish and the API and exporters read.
//!
//! [`kernel`] holds the kernel sampler's counters (with the kernel symbol table they
//! are resolved against); [`jvm`] holds the JVMs' Method Call Trees. Neither knows the
//! collector that feeds it: collectors import a store, never the other way round.
//! [`windows`] holds the exact windows jpd opened in JVMs (the windows service fills it).
//! [`read`] is how everything downstream reads them: snapshots, lists, windows over
//! time, and the one rule for the JVM store's lock.
pub mod jvm;
pub mod kernel;
pub mod read;
pub mod windows;

use std::sync::{Arc, Mutex};

/// Both stores, as the gRPC server and the exporters read them.
#[derive(Clone)]
pub struct Sources {
    pub kernel: Arc<kernel::KernelStore>,
    pub jvm: jvm::SharedJvmStore,
    pub windows: windows::SharedWindowStore,
}

/// Kernel data only: the JVM store stays empty (no USDT collector feeds it).
impl From<Arc<kernel::KernelStore>> for Sources {
    fn from(kernel: Arc<kernel::KernelStore>) -> Sources {
        Sources {
            kernel,
            jvm: Arc::new(Mutex::new(jvm::JvmStore::new(jvm::JvmLimits::default()))),
            windows: Arc::default(),
        }
    }
}
