"""Schema presets (YAML data shipped in this package) and their loader and validator."""

from curator.schemas.loader import (
    SchemaError,
    SchemaIssue,
    dump_schema,
    load_preset,
    load_schema,
    parse_schema,
    preset_names,
    schema_from_data,
)
from curator.schemas.model import AlwaysInject, Compression, FieldSpec, Relation, Schema, TypeSpec

__all__ = [
    "AlwaysInject", "Compression", "FieldSpec", "Relation", "Schema", "SchemaError", "SchemaIssue", "TypeSpec",
    "dump_schema", "load_preset", "load_schema", "parse_schema", "preset_names", "schema_from_data",
]
