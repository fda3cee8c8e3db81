"""Experiment files' layering and ``--set`` overrides: plain mappings merged, dotted keys set, ``key=value``
read as YAML (:mod:`envengineer.loop.experiment` reads files with them)."""

from __future__ import annotations

from typing import Any

from envengineer.errors import ConfigError
from envengineer.yamlio import YAMLDataError, brief, load_yaml


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` on top of ``base``: mappings merge key by key, other values replace.

    >>> deep_merge({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"y": 3}, "b": [2]})
    {'a': {'x': 1, 'y': 3}, 'b': [2]}
    """
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``data["a"]["b"] = value`` for ``key="a.b"``, creating mappings on the way.

    >>> d = {"engineer": "x"}; set_dotted(d, "engineer.kind", "fixed"); d
    {'engineer': {'kind': 'fixed'}}
    """
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``"rounds=2"`` -> ``("rounds", 2)``; the value is read as YAML (numbers, booleans, null, lists).

    >>> parse_override("engineer.context=V3")
    ('engineer.context', 'V3')
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} must look like key=value, e.g. rounds=2 or engineer.kind=fixed")
    try:
        return key.strip(), load_yaml(value)
    except YAMLDataError as exc:
        raise ConfigError(f"override {brief(text)}: the value is not valid YAML ({exc})") from None
