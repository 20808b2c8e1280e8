//! The dictionary: every string, mapping, function, location and stack of a message is
//! written once and referred to by its index in its table. Entry 0 of every table is the
//! zero value, as the protocol requires (index 0 means "none").

use std::collections::HashMap;

use prost::Message;

use super::proto::common::v1::{InstrumentationScope, KeyValue};
use super::proto::profiles::v1development as otlp;
use super::proto::resource::v1::Resource;
use super::SCOPE_NAME;
use crate::pprof;

/// A table whose rows are written once: a row's index is found by its encoded bytes.
struct Interned<M> {
    rows: Vec<M>,
    index: HashMap<Vec<u8>, i32>,
}

impl<M: Message + Default> Interned<M> {
    fn new() -> Interned<M> {
        let mut t = Interned {
            rows: Vec::new(),
            index: HashMap::new(),
        };
        t.get(M::default());
        t
    }

    fn get(&mut self, row: M) -> i32 {
        let key = row.encode_to_vec();
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = table_index(self.rows.len());
        self.rows.push(row);
        self.index.insert(key, i);
        i
    }
}

/// The string table: index 0 is the empty string.
struct Strings {
    rows: Vec<String>,
    index: HashMap<String, i32>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings {
            rows: Vec::new(),
            index: HashMap::new(),
        };
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = table_index(self.rows.len());
        self.rows.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// Tables are indexed by `int32`: a table that outgrew it (never in practice: 2³¹
/// rows) keeps pointing at its last index rather than wrapping.
fn table_index(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

/// Builds one OTLP profiles message: [`OtlpBuilder::add`] each resource's profile, then
/// [`OtlpBuilder::finish`].
pub struct OtlpBuilder {
    strings: Strings,
    mappings: Interned<otlp::Mapping>,
    functions: Interned<otlp::Function>,
    locations: Interned<otlp::Location>,
    stacks: Interned<otlp::Stack>,
    resources: Vec<otlp::ResourceProfiles>,
}

impl Default for OtlpBuilder {
    fn default() -> OtlpBuilder {
        OtlpBuilder {
            strings: Strings::new(),
            mappings: Interned::new(),
            functions: Interned::new(),
            locations: Interned::new(),
            stacks: Interned::new(),
            resources: Vec::new(),
        }
    }
}

impl OtlpBuilder {
    /// Adds `p` as the profiles of one resource: one profile per sample type of `p`.
    /// Returns how many profiles that was.
    pub fn add(&mut self, resource: Vec<KeyValue>, p: &pprof::Profile) -> usize {
        let stacks = self.stacks_of(p);
        let s = |i: i64| string_at(p, i);
        let period_type = p.period_type.as_ref().map(|t| self.value_type(p, t));
        let resource_index = self.resources.len() as u32;
        let mut profiles = Vec::with_capacity(p.sample_type.len());
        for (k, ty) in p.sample_type.iter().enumerate() {
            let samples = p
                .sample
                .iter()
                .zip(&stacks)
                .filter_map(|(smp, &stack_index)| {
                    let v = smp.value.get(k).copied().filter(|&v| v != 0)?;
                    Some(otlp::Sample {
                        stack_index,
                        values: vec![v],
                        ..otlp::Sample::default()
                    })
                })
                .collect();
            let sample_type = otlp::ValueType {
                type_strindex: self.strings.get(s(ty.r#type)),
                unit_strindex: self.strings.get(s(ty.unit)),
            };
            profiles.push(otlp::Profile {
                sample_type: Some(sample_type),
                samples,
                time_unix_nano: u64::try_from(p.time_nanos).unwrap_or(0),
                duration_nano: u64::try_from(p.duration_nanos).unwrap_or(0),
                period_type,
                period: p.period,
                profile_id: profile_id(p.time_nanos, resource_index, k),
                ..otlp::Profile::default()
            });
        }
        let added = profiles.len();
        self.resources.push(otlp::ResourceProfiles {
            resource: Some(Resource {
                attributes: resource,
                dropped_attributes_count: 0,
            }),
            scope_profiles: vec![otlp::ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: SCOPE_NAME.to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..InstrumentationScope::default()
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
        added
    }

    /// How many profiles were added so far.
    pub fn profiles(&self) -> usize {
        self.resources
            .iter()
            .flat_map(|r| &r.scope_profiles)
            .map(|s| s.profiles.len())
            .sum()
    }

    /// The message: every resource's profiles and the one dictionary they index.
    pub fn finish(self) -> otlp::ProfilesData {
        otlp::ProfilesData {
            resource_profiles: self.resources,
            dictionary: Some(otlp::ProfilesDictionary {
                mapping_table: self.mappings.rows,
                location_table: self.locations.rows,
                function_table: self.functions.rows,
                link_table: vec![otlp::Link::default()],
                string_table: self.strings.rows,
                attribute_table: vec![otlp::KeyValueAndUnit::default()],
                stack_table: self.stacks.rows,
            }),
        }
    }

    fn value_type(&mut self, p: &pprof::Profile, t: &pprof::ValueType) -> otlp::ValueType {
        otlp::ValueType {
            type_strindex: self.strings.get(string_at(p, t.r#type)),
            unit_strindex: self.strings.get(string_at(p, t.unit)),
        }
    }

    /// Each sample's stack index, entering `p`'s mappings, functions and locations.
    fn stacks_of(&mut self, p: &pprof::Profile) -> Vec<i32> {
        let mut mapping_of: HashMap<u64, i32> = HashMap::new();
        for m in &p.mapping {
            let row = otlp::Mapping {
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: m.file_offset,
                filename_strindex: self.strings.get(string_at(p, m.filename)),
                ..otlp::Mapping::default()
            };
            mapping_of.insert(m.id, self.mappings.get(row));
        }
        let mut function_of: HashMap<u64, i32> = HashMap::new();
        for f in &p.function {
            let row = otlp::Function {
                name_strindex: self.strings.get(string_at(p, f.name)),
                system_name_strindex: self.strings.get(string_at(p, f.system_name)),
                filename_strindex: self.strings.get(string_at(p, f.filename)),
                start_line: 0,
            };
            function_of.insert(f.id, self.functions.get(row));
        }
        let mut location_of: HashMap<u64, i32> = HashMap::new();
        for l in &p.location {
            let lines = l
                .line
                .iter()
                .map(|line| otlp::Line {
                    function_index: function_of.get(&line.function_id).copied().unwrap_or(0),
                    ..otlp::Line::default()
                })
                .collect();
            let row = otlp::Location {
                mapping_index: mapping_of.get(&l.mapping_id).copied().unwrap_or(0),
                address: l.address,
                lines,
                ..otlp::Location::default()
            };
            location_of.insert(l.id, self.locations.get(row));
        }
        p.sample
            .iter()
            .map(|smp| {
                let location_indices = smp
                    .location_id
                    .iter()
                    .map(|id| location_of.get(id).copied().unwrap_or(0))
                    .collect();
                self.stacks.get(otlp::Stack { location_indices })
            })
            .collect()
    }
}

/// `p`'s string `i` (out of range: the empty string).
fn string_at(p: &pprof::Profile, i: i64) -> &str {
    usize::try_from(i)
        .ok()
        .and_then(|i| p.string_table.get(i))
        .map_or("", String::as_str)
}

/// A profile's id (16 bytes, never all zero as the protocol requires): its start time,
/// its resource's place in the message and its sample type's, so that every profile of
/// an exporter's run has its own.
fn profile_id(time_nanos: i64, resource: u32, sample_type: usize) -> Vec<u8> {
    let mut id = Vec::with_capacity(16);
    id.extend_from_slice(&time_nanos.to_be_bytes());
    id.extend_from_slice(&resource.to_be_bytes());
    id.extend_from_slice(&(sample_type as u32 + 1).to_be_bytes());
    id
}
