"""Reads OTLP profiles (ProfilesData, or an ExportProfilesServiceRequest,
which shares its fields) with OpenTelemetry's own Python bindings (PyPI's
opentelemetry-proto), independent of stoke's encoder, and prints what the
tests compare as JSON: for each file, the resource attributes, and per
profile its sample type, total value, the value of the samples whose
stack holds each function, and the sample attributes' keys."""

import json
import sys

from opentelemetry.proto.profiles.v1development import profiles_pb2


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def decode(path):
    data = profiles_pb2.ProfilesData()
    with open(path, "rb") as file:
        data.ParseFromString(file.read())
    d = data.dictionary
    strings = d.string_table

    def function_names(stack_index):
        names = set()
        for location_index in d.stack_table[stack_index].location_indices:
            for line in d.location_table[location_index].lines:
                names.add(strings[d.function_table[line.function_index].name_strindex])
        return names

    resources = []
    for resource_profiles in data.resource_profiles:
        attributes = {kv.key: value(kv.value) for kv in resource_profiles.resource.attributes}
        profiles = []
        for scope in resource_profiles.scope_profiles:
            for profile in scope.profiles:
                by_function = {}
                keys = set()
                total = 0
                for sample in profile.samples:
                    amount = sum(sample.values)
                    total += amount
                    for name in function_names(sample.stack_index):
                        by_function[name] = by_function.get(name, 0) + amount
                    for index in sample.attribute_indices:
                        keys.add(strings[d.attribute_table[index].key_strindex])
                profiles.append({
                    "type": strings[profile.sample_type.type_strindex],
                    "unit": strings[profile.sample_type.unit_strindex],
                    "total": total,
                    "by_function": by_function,
                    "sample_attributes": sorted(keys),
                })
        resources.append({"attributes": attributes, "profiles": profiles})
    return resources


print(json.dumps({path: decode(path) for path in sys.argv[1:]}))
