"""Reading a user's YAML file (the config, a topology): data, or one line saying why not. Unreadable, not
UTF-8 text, not YAML, a key given twice, nested deeper than any config (PyYAML's scanner slows down
quadratically with the depth: 100,000 brackets never finish), with aliases (an alias that expands other
aliases grows exponentially: a 1 KB file can ask for gigabytes), larger than any config, or with a tagged
value that cannot be built (`!!int abc`, a 5,000-digit number, a list as a key)."""

from __future__ import annotations

from pathlib import Path

import yaml

MAX_DEPTH = 32
"""Nesting of mappings and lists a file may have (a config has 3 levels, a topology 4)."""
MAX_BYTES = 4 * 1024**2
"""The largest file read (a config or a topology is a few KB)."""


class YamlFileError(ValueError):
    """The file gives no data; the message says why in one line."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML keeps the last one silently: a
    second `scaling:` section would drop the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise yaml.constructor.ConstructorError(None, None, f"line {line}: {key!r} given twice", None)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_bounded(path: str | Path, limit_bytes: int) -> bytes:
    """The file's bytes; ValueError for one larger than `limit_bytes` (/dev/zero as an input read forever).
    OSError as opening and reading raise it."""
    with Path(path).open("rb") as handle:
        data = handle.read(limit_bytes + 1)
    if len(data) > limit_bytes:
        raise ValueError(f"larger than {limit_bytes // 1024**2} MB")
    return data


def read_yaml(path: str | Path) -> object:
    try:
        text = read_bounded(path, MAX_BYTES).decode("utf-8")
    except OSError as error:
        raise YamlFileError(f"cannot read file: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise YamlFileError(f"not UTF-8 text (byte {error.start})") from error
    except ValueError as error:
        raise YamlFileError(f"{error}: not a configuration") from error
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent):
                raise YamlFileError(f"line {line}: YAML aliases (*{event.anchor}) are not accepted")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlFileError(f"line {line}: nested more than {MAX_DEPTH} levels deep")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except YamlFileError:
        raise
    except yaml.YAMLError as error:
        raise YamlFileError(f"not valid YAML: {' '.join(str(error).split())}") from error
    except (ValueError, TypeError, RecursionError) as error:  # a tagged value YAML parsed but cannot build
        raise YamlFileError(f"not valid YAML: {' '.join(str(error).split())[:200]}") from error
