"""``--config KEY=VALUE`` values, typed once: by config/schema.yaml.

Snakemake reads ``--config 'decode={port: 30117}'`` with YAML's base loader, so every value
inside a mapping or list arrives as a string, and the quotes a user wrote are gone by then
(top-level values it types itself, as int, float or bool where they look like one). Typing
those strings again as YAML would, guessing from how they look, changes what was written:
``STUDY_TAG: "0755"`` became the octal 493, a quoted ``"yes"`` a boolean, ``host: "::"`` a
mapping. Here each entry is read again from the words Snakemake was given
(``workflow.config_settings.config_args``), quotes remembered, and each value is typed by
the schema's type at its key:

* a string key keeps the text as written (quoted or not);
* an integer, number or boolean key types the text as a config file would (a quoted number
  too: the schema says what it is);
* a key that takes a string or a number (an environment value, a server argument) keeps the
  text unless it was written unquoted and is a plain number that reads back as the same text
  (``1``, ``0.85``; not ``0755`` or ``1e3``);
* a key that takes a string or null reads an unquoted ``null`` or ``~`` as null.

A value the schema refuses is left as it was written, for the schema to name.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import yaml

__all__ = ["CliValueError", "apply_cli_values", "cli_values"]

SCHEMA = Path(__file__).resolve().parents[3] / "config" / "schema.yaml"


class CliValueError(ValueError):
    """A ``--config`` value that is not YAML: one line naming the entry."""


class _Quoted(str):
    """A scalar written in quotes: text, whatever it looks like."""


class _CliLoader(yaml.BaseLoader):
    """YAML's base loader (every scalar a string, as Snakemake reads ``--config``) that
    remembers which scalars were quoted."""


def _scalar(loader: _CliLoader, node: yaml.ScalarNode) -> str:
    text = loader.construct_scalar(node)
    return _Quoted(text) if node.style in ("'", '"') else text


_CliLoader.add_constructor("tag:yaml.org,2002:str", _scalar)


def _read_entry(entry: str):
    key, _, text = str(entry).partition("=")
    if text == "":
        return key, None  # as Snakemake reads KEY=
    try:
        return key, yaml.load(text, Loader=_CliLoader)  # noqa: S506 - the base loader: strings only
    except yaml.YAMLError as exc:
        if not text.lstrip().startswith(("{", "[")):
            return key, text  # as Snakemake: a value that is not YAML is the text itself
        mark = getattr(exc, "problem_mark", None)
        where = f" at column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CliValueError(
            f"--config {key}={text}: not YAML{where} ({problem}): quote a value that holds "
            'YAML\'s special characters (: , [ ] { } #), as in host: "::1"'
        ) from None


def _resolve(schema, root: dict):
    """``schema`` with its ``$ref`` (``#/$defs/...``) followed, siblings kept."""
    while isinstance(schema, dict) and "$ref" in schema:
        target = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _child(schema, key, root: dict):
    """The schema of ``key`` inside an object's ``schema``, or None."""
    schema = _resolve(schema, root)
    if not isinstance(schema, dict):
        return None
    if key in schema.get("properties", {}):
        return schema["properties"][key]
    for pattern, sub in schema.get("patternProperties", {}).items():
        if re.search(pattern, str(key)):
            return sub
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def _as_config_file(text: str):
    """``text`` as a config file's YAML types it (numbers also with an exponent), or the
    text itself where that is no finite scalar."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        try:
            value = float(value) if re.fullmatch(r"[-+]?[0-9.]+[eE][-+]?[0-9]+", value) else value
        except ValueError:
            return text
    if isinstance(value, float) and not math.isfinite(value):
        return text
    return value if value is None or isinstance(value, (bool, int, float)) else text


_FITS = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _typed_scalar(text: str | None, schema) -> object:
    types = (schema or {}).get("type") or []
    types = [types] if isinstance(types, str) else list(types)
    if text is None:
        return "" if "string" in types and "null" not in types else None
    quoted = isinstance(text, _Quoted)
    text = str(text)
    if not types:
        return text  # a key the schema does not know: it names it
    if "string" in types:
        if quoted:
            return text
        value = _as_config_file(text)
        if "null" in types and value is None and text.strip():
            return None
        if ({"integer", "number"} & set(types) and _FITS["number"](value)
                and str(value) == text):  # fmt: skip
            return value
        return text
    value = _as_config_file(text)
    return value if any(_FITS.get(t, lambda v: False)(value) for t in types) else text


def _typed(value, schema, root: dict):
    schema = _resolve(schema, root)
    if isinstance(value, dict):
        return {key: _typed(item, _child(schema, key, root), root) for key, item in value.items()}
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        return [_typed(item, items, root) for item in value]
    return _typed_scalar(value, schema)


def _merge(into: dict, value: dict) -> None:
    for key, item in value.items():
        if isinstance(item, dict) and isinstance(into.get(key), dict):
            _merge(into[key], item)
        else:
            into[key] = item


def cli_values(entries, schema_path: str | Path = SCHEMA) -> dict:
    """The ``--config`` entries (``KEY=VALUE`` words, as given) typed by the schema; entries
    of one key merged in order, as Snakemake merges them. CliValueError for a mapping or
    list that is not YAML."""
    root = yaml.safe_load(Path(schema_path).read_text(encoding="utf-8"))
    values: dict = {}
    for entry in [entries] if isinstance(entries, str) else entries or []:
        key, raw = _read_entry(entry)
        _merge(values, {key: _typed(raw, _child(root, key, root), root)})
    return values


def apply_cli_values(config: dict, values: dict) -> None:
    """Put the typed ``--config`` values into ``config`` (where Snakemake merged its own
    typing of them)."""
    _merge(config, values)
