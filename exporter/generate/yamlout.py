"""YAML for generated files: multi-line strings (PromQL, templates, embedded files) as `|` blocks."""
from __future__ import annotations

import yaml


class BlockDumper(yaml.SafeDumper):
    """SafeDumper that writes strings containing newlines as literal blocks, so generated rules,
    ConfigMaps and embedded dashboards stay readable and diff line by line."""


def _str(dumper, value):
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


BlockDumper.add_representer(str, _str)
