"""prime-rl config knowledge: schema, rule database, validation, memory estimates, wizard, versions.

Everything here is plain Python over TOML text (no Textual, no I/O beyond the files it is asked to
read or write). The rule knowledge lives in data files shipped with the package: ``schema.toml``
(prime-rl's config classes), ``rules.toml`` (every finding: id, severity, message, fix, source; and
the migration table), ``models.toml`` (model shapes) and ``presets.toml`` (GPU presets).
"""
