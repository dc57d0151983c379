"""The run record: what ran, where, with which versions and configs, how it ended, and whether
that is what was intended (docs/record.md).

Modules: :mod:`~rlark.record.schema` (the record's typed, closed models, which are also its
published JSON Schema), :mod:`~rlark.record.build` (assembles a record from stored rows through
those models; pure), :mod:`~rlark.record.checks` (the automatic checks), :mod:`~rlark.record.diff`
(the comparison of two records) and :mod:`~rlark.record.export` (JSON, YAML, Markdown).

Nothing is imported here, so the store can validate a record against
:mod:`rlark.record.schema` without importing the builder and what it reads.
"""
