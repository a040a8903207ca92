"""The base every layer may import: errors, the version, span attribute names, units."""
