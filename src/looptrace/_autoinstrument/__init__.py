"""The directory `looptrace run` puts first on `PYTHONPATH`: its `sitecustomize` instruments."""
