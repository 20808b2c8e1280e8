//! `[otlp] resource_attributes` as jpd runs now, shared by the exporter's requests and the
//! files jpctl asks for (`--format otlp`): a leaf of its own, since the export state, the
//! API server and the OTLP exporter all hold it.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// Set at start and on SIGHUP, whether exporting is on or not.
#[derive(Clone, Debug, Default)]
pub struct OperatorAttributes(Arc<RwLock<BTreeMap<String, String>>>);

impl OperatorAttributes {
    pub fn set(&self, attributes: &BTreeMap<String, String>) {
        let mut current = self.0.write().unwrap_or_else(|p| p.into_inner());
        attributes.clone_into(&mut current);
    }

    pub fn get(&self) -> BTreeMap<String, String> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
