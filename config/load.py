"""Reading, validating and documenting the config file.

A bad file yields a `ConfigError` naming every wrong field with its allowed values; the CLI turns it into
exit code 2.
"""

from __future__ import annotations

import typing
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from config.schema import Config
from config.yaml_file import YamlFileError, read_yaml


class ConfigError(Exception):
    """The config file is unreadable or invalid; `problems` lists one line per wrong field."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: invalid configuration\n" + "\n".join(f"  - {p}" for p in problems))

    def __reduce__(self) -> tuple:
        """Picklable, so an error in a worker process (foresail compare) reaches the parent intact."""
        return ConfigError, (self.source, self.problems)


def load_config(path: str | Path | None) -> Config:
    """The validated config from a YAML file; defaults when `path` is None."""
    if path is None:
        return Config()
    source = str(path)
    try:
        data = read_yaml(path)
    except YamlFileError as error:
        raise ConfigError(source, [str(error)]) from error
    return parse_config(data or {}, source)


def parse_config(data: object, source: str = "<config>") -> Config:
    if not isinstance(data, dict):
        raise ConfigError(source, [f"top level must be a mapping of sections, got {type(data).__name__}"])
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        problems = [line for item in error.errors() for line in _describe(item).splitlines()]
        raise ConfigError(source, problems) from error


def _describe(item: dict) -> str:
    location = ".".join(str(part) for part in item["loc"])
    if item["type"] == "extra_forbidden":
        parent = _model_at(item["loc"][:-1])
        allowed = ", ".join(parent.model_fields) if parent else "?"
        return f"{location or '(top level)'}: unknown field (allowed here: {allowed})"
    message = item["msg"]
    if message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
    if (
        item["type"] == "value_error" and _model_at(item["loc"]) is not None
    ):  # rules across fields, a line each
        return "\n".join(f"{location}: {line}" if location else line for line in message.splitlines())
    allowed = _allowed_values(item["loc"])
    suffix = f" (allowed: {allowed})" if allowed and "allowed" not in message else ""
    return f"{location}: {message}; got {item.get('input')!r}{suffix}"


def _model_at(loc: tuple) -> type[BaseModel] | None:
    model: type[BaseModel] = Config
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not (
            isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        ):
            return None
        model = field.annotation
    return model


def _allowed_values(loc: tuple) -> str | None:
    """A human summary of what a field accepts: its choices, or its type and bounds."""
    parent = _model_at(loc[:-1]) if loc else None
    field = parent.model_fields.get(str(loc[-1])) if parent else None
    if field is None:
        return None
    choices = typing.get_args(field.annotation)
    if typing.get_origin(field.annotation) is typing.Literal:
        return " | ".join(repr(c) for c in choices)
    bounds = []
    for rule in field.metadata:
        for name, symbol in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(rule, name, None)
            if value is not None:
                bounds.append(f"{symbol} {value}")
    origin = typing.get_origin(field.annotation)
    if origin is dict:  # its arguments are the key's and the value's types, not alternatives
        kinds = [f"a mapping of {' → '.join(_kind_name(c) for c in choices)}"]
    elif origin in (list, tuple, set, frozenset):
        kinds = [f"a list of {_kind_name(choices[0])}"]
    else:
        kinds = [_kind_name(c) for c in choices] if choices else [field.annotation.__name__]
    kind = " or ".join("null" if k == "NoneType" else k for k in kinds)
    return f"{kind} {' and '.join(bounds)}".strip()


def _kind_name(annotation: object) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return " | ".join(repr(c) for c in typing.get_args(annotation))
    return getattr(annotation, "__name__", str(annotation))


def render_example() -> str:
    """An annotated YAML file with every option at its default, generated from the schema."""
    lines = [
        "# foresail configuration: every option with its default and meaning.",
        "# Generated from config/schema.py by `foresail config-example`; do not edit by hand.",
        "",
    ]
    defaults = Config().model_dump()
    for section_name, section_field in Config.model_fields.items():
        section = section_field.annotation
        lines.append(f"{section_name}:")
        for name, field in section.model_fields.items():
            value = defaults[section_name][name]
            lines.append(f"  # {field.description} Allowed: {_allowed_values((section_name, name))}.")
            lines.append(
                f"  {name}: {yaml.safe_dump(value, default_flow_style=True, width=float('inf')).strip().removesuffix('...').strip()}"
            )
        lines.append("")
    return "\n".join(lines)


def with_overrides(config: Config, section: str, **values: object) -> Config:
    """The config with the given (non-None) values of one section replaced, validated again (command-line
    flags that override the file)."""
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return config
    data = config.model_dump()
    data[section] = {**data[section], **values}
    return parse_config(data, "command line")
