"""The CDI layer: read, validate and resolve Container Device Interface specs.

Reading order: `model` (typed, immutable spec data), `names` (qualified device
names), `parse` (a spec file's JSON or YAML to the model, through `yaml_loader`
and `yaml_constructors`, which read YAML as go-yaml v2 does, and `go_scalars`,
scalars as the reference's Go decoders read them), `schema` (the first
validation pass, against a JSON Schema), `validate` (the rules a schema cannot
say), `spec_file` (one file read and validated), `spec_cache` (each file's
outcome, kept while its bytes are unchanged), `registry` (every spec of the
spec dirs, indexed, and the resolve step), `edits` (container edits merged and
written as CDI JSON), `cli` (``ateom cdi``), `testing` (specs on disk for tests).
See docs/cdi.md. Nothing here is imported eagerly, so ``import ateom.cdi.model``
stays cheap for code that only needs the dataclasses.
"""
