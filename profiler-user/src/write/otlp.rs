//! OpenTelemetry's profiles signal (OTLP, `profiles/v1development`): a
//! pprof profile (see [`super::pprof`]) as `ProfilesData`, whose fields an
//! OTLP/HTTP `ExportProfilesServiceRequest` shares, so one encoding serves
//! the file (`-o FILE.otlp.pb`) and the push (`--otlp URL`).
//!
//! One `Profile` per pprof sample type (CPU samples, and their CPU time),
//! under one `ResourceProfiles` whose resource names the service, host and
//! container; the samples' own labels become attributes under the
//! semantic conventions' names (`process.pid`, `thread.id`...). The tables
//! of the dictionary keep the format's zero entry at index 0.

use std::{collections::HashMap, io};

use opentelemetry_proto::tonic::{
    common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue},
    profiles::v1development::{
        Function, KeyValueAndUnit, Line, Location, Mapping, Profile, ProfilesData,
        ProfilesDictionary, ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
    },
    resource::v1::Resource,
};
use prost::Message;

use super::pprof::{self, proto};
use crate::model;

/// The semantic conventions' name of each of stoke's labels that has one.
fn attribute_name(label: &str) -> &str {
    match label {
        "pid" => "process.pid",
        "comm" => "process.executable.name",
        "exe" => "process.executable.path",
        "tid" => "thread.id",
        "thread" => "thread.name",
        "container_id" => "container.id",
        "container_name" => "container.name",
        "image" => "container.image.name",
        "pod" => "k8s.pod.name",
        "namespace" => "k8s.namespace.name",
        "workload" => "k8s.deployment.name",
        "service" => "service.name",
        other => other,
    }
}

/// The resource of a profile of `service` (if one is named) on `host`,
/// with `labels` (the service's, then static ones) under their
/// conventional names, each name once.
pub fn resource(service: Option<&str>, host: &str, labels: &[(String, String)]) -> Resource {
    let mut attributes: Vec<KeyValue> = Vec::new();
    let named = service.map(|service| ("service.name", service));
    let pairs = named.into_iter().chain([("host.name", host)]).chain(
        labels
            .iter()
            .map(|(key, value)| (attribute_name(key), value.as_str())),
    );
    for (key, value) in pairs {
        if attributes.iter().any(|seen| seen.key == key) {
            continue;
        }
        attributes.push(KeyValue {
            key: key.to_owned(),
            value: Some(string_value(value)),
            ..KeyValue::default()
        });
    }
    Resource {
        attributes,
        ..Resource::default()
    }
}

fn string_value(value: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(value.to_owned())),
    }
}

/// `pprof` as profiles data of `resource`.
pub fn from_pprof(pprof: &proto::Profile, resource: Resource) -> ProfilesData {
    let mut dictionary = Dictionary::new();
    let profiles = dictionary.profiles(pprof);
    ProfilesData {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(resource),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "stoke".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..InstrumentationScope::default()
                }),
                profiles,
                ..ScopeProfiles::default()
            }],
            ..ResourceProfiles::default()
        }],
        dictionary: Some(dictionary.table),
    }
}

/// Writes all of `profile` as OTLP profiles data, its resource the host.
pub fn write(profile: &model::Profile, out: &mut dyn io::Write) -> io::Result<()> {
    let pprof = pprof::build(profile, &profile.stacks);
    let host = crate::process::identity::host_name();
    let data = from_pprof(&pprof, resource(None, &host, &[]));
    out.write_all(&data.encode_to_vec())
}

/// The dictionary's tables as they are filled, each entry once.
struct Dictionary {
    table: ProfilesDictionary,
    strings: HashMap<String, i32>,
    stacks: HashMap<Vec<i32>, i32>,
    attributes: HashMap<(i32, Attribute), i32>,
}

/// An attribute's value, as a key of [`Dictionary::attributes`].
#[derive(Clone, PartialEq, Eq, Hash)]
enum Attribute {
    Text(i32),
    Number(i64, i32),
}

impl Dictionary {
    fn new() -> Self {
        let mut dictionary = Self {
            table: ProfilesDictionary {
                mapping_table: vec![Mapping::default()],
                location_table: vec![Location::default()],
                function_table: vec![Function::default()],
                link_table: vec![Default::default()],
                string_table: Vec::new(),
                attribute_table: vec![KeyValueAndUnit::default()],
                stack_table: vec![Stack::default()],
            },
            strings: HashMap::new(),
            stacks: HashMap::new(),
            attributes: HashMap::new(),
        };
        dictionary.string("");
        dictionary
    }

    fn string(&mut self, text: &str) -> i32 {
        if let Some(&index) = self.strings.get(text) {
            return index;
        }
        let index = table_index(self.table.string_table.len());
        self.table.string_table.push(text.to_owned());
        self.strings.insert(text.to_owned(), index);
        index
    }

    /// One profile per sample type of `pprof`.
    fn profiles(&mut self, pprof: &proto::Profile) -> Vec<Profile> {
        let text = |index: i64| {
            usize::try_from(index)
                .ok()
                .and_then(|index| pprof.string_table.get(index))
                .map_or("", String::as_str)
        };
        let strings = |dictionary: &mut Self, index| dictionary.string(text(index));
        let mut mappings = HashMap::new();
        for mapping in &pprof.mapping {
            let filename_strindex = strings(self, mapping.filename);
            mappings.insert(mapping.id, table_index(self.table.mapping_table.len()));
            self.table.mapping_table.push(Mapping {
                memory_start: mapping.memory_start,
                memory_limit: mapping.memory_limit,
                file_offset: mapping.file_offset,
                filename_strindex,
                ..Mapping::default()
            });
        }
        let mut functions = HashMap::new();
        for function in &pprof.function {
            let entry = Function {
                name_strindex: strings(self, function.name),
                system_name_strindex: strings(self, function.system_name),
                filename_strindex: strings(self, function.filename),
                start_line: function.start_line,
            };
            functions.insert(function.id, table_index(self.table.function_table.len()));
            self.table.function_table.push(entry);
        }
        let mut locations = HashMap::new();
        for location in &pprof.location {
            let lines = location
                .line
                .iter()
                .map(|line| Line {
                    function_index: functions.get(&line.function_id).copied().unwrap_or(0),
                    line: line.line,
                    column: line.column,
                })
                .collect();
            locations.insert(location.id, table_index(self.table.location_table.len()));
            self.table.location_table.push(Location {
                mapping_index: mappings.get(&location.mapping_id).copied().unwrap_or(0),
                address: location.address,
                lines,
                ..Location::default()
            });
        }
        let samples: Vec<(i32, Vec<i32>, &[i64])> = pprof
            .sample
            .iter()
            .map(|sample| {
                let stack: Vec<i32> = sample
                    .location_id
                    .iter()
                    .map(|id| locations.get(id).copied().unwrap_or(0))
                    .collect();
                let attributes = sample
                    .label
                    .iter()
                    .map(|label| self.attribute(text(label.key), label, &text))
                    .collect();
                (self.stack(stack), attributes, sample.value.as_slice())
            })
            .collect();
        let period_type = pprof.period_type.as_ref().map(|kind| ValueType {
            type_strindex: self.string(text(kind.r#type)),
            unit_strindex: self.string(text(kind.unit)),
        });
        pprof
            .sample_type
            .iter()
            .enumerate()
            .map(|(column, kind)| Profile {
                sample_type: Some(ValueType {
                    type_strindex: self.string(text(kind.r#type)),
                    unit_strindex: self.string(text(kind.unit)),
                }),
                samples: samples
                    .iter()
                    .filter_map(|(stack_index, attributes, values)| {
                        let value = *values.get(column)?;
                        (value != 0).then(|| Sample {
                            stack_index: *stack_index,
                            attribute_indices: attributes.clone(),
                            values: vec![value],
                            ..Sample::default()
                        })
                    })
                    .collect(),
                time_unix_nano: u64::try_from(pprof.time_nanos).unwrap_or(0),
                duration_nano: u64::try_from(pprof.duration_nanos).unwrap_or(0),
                period_type,
                period: pprof.period,
                ..Profile::default()
            })
            .collect()
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&index) = self.stacks.get(&locations) {
            return index;
        }
        let index = table_index(self.table.stack_table.len());
        self.table.stack_table.push(Stack {
            location_indices: locations.clone(),
        });
        self.stacks.insert(locations, index);
        index
    }

    /// A pprof label as an attribute under its conventional name.
    fn attribute<'t>(
        &mut self,
        key: &str,
        label: &proto::Label,
        text: &impl Fn(i64) -> &'t str,
    ) -> i32 {
        let key_strindex = self.string(attribute_name(key));
        let value = if label.str != 0 {
            Attribute::Text(self.string(text(label.str)))
        } else {
            Attribute::Number(label.num, self.string(text(label.num_unit)))
        };
        if let Some(&index) = self.attributes.get(&(key_strindex, value.clone())) {
            return index;
        }
        let (any, unit_strindex) = match &value {
            Attribute::Text(index) => (
                any_value::Value::StringValue(self.table.string_table[*index as usize].clone()),
                0,
            ),
            Attribute::Number(number, unit) => (any_value::Value::IntValue(*number), *unit),
        };
        let index = table_index(self.table.attribute_table.len());
        self.table.attribute_table.push(KeyValueAndUnit {
            key_strindex,
            value: Some(AnyValue { value: Some(any) }),
            unit_strindex,
        });
        self.attributes.insert((key_strindex, value), index);
        index
    }
}

/// A table's next index: the format's indexes are 32-bit, and a profile
/// has far fewer entries than that.
fn table_index(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::tests::profile;

    #[test]
    fn samples_stacks_and_attributes_come_through() {
        let profile = profile(&[("app [1];main;work", 3), ("app [1];main;idle", 1)]);
        let pprof = pprof::build(&profile, &profile.stacks);
        let data = from_pprof(&pprof, resource(Some("web"), "host1", &[]));
        let dictionary = data.dictionary.as_ref().unwrap();
        assert_eq!(dictionary.string_table[0], "");
        assert_eq!(dictionary.stack_table[0], Stack::default());
        let profiles = &data.resource_profiles[0].scope_profiles[0].profiles;
        let samples = &profiles[0].samples;
        let total: i64 = samples.iter().map(|sample| sample.values[0]).sum();
        assert_eq!(total, 4);
        let leaf = |sample: &Sample| {
            let stack = &dictionary.stack_table[sample.stack_index as usize];
            let location = &dictionary.location_table[stack.location_indices[0] as usize];
            let function = &dictionary.function_table[location.lines[0].function_index as usize];
            dictionary.string_table[function.name_strindex as usize].clone()
        };
        let work: i64 = samples
            .iter()
            .filter(|sample| leaf(sample) == "work")
            .map(|sample| sample.values[0])
            .sum();
        assert_eq!(work, 3);
        let attributes = &data.resource_profiles[0]
            .resource
            .as_ref()
            .unwrap()
            .attributes;
        let keys: Vec<&str> = attributes.iter().map(|kv| kv.key.as_str()).collect();
        assert_eq!(keys, ["service.name", "host.name"]);
    }

    #[test]
    fn labels_take_their_conventional_names_once() {
        let labels = [
            ("container_id".to_owned(), "abc".to_owned()),
            ("pod".to_owned(), "web-1".to_owned()),
            ("cluster".to_owned(), "prod".to_owned()),
            ("pod".to_owned(), "again".to_owned()),
        ];
        let resource = resource(Some("web"), "h", &labels);
        let keys: Vec<&str> = resource
            .attributes
            .iter()
            .map(|kv| kv.key.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "service.name",
                "host.name",
                "container.id",
                "k8s.pod.name",
                "cluster"
            ]
        );
    }
}
