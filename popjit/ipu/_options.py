"""The machinery of a typed option tree, as Graphcore's ``ipu.config`` has it: declarations
(``_Option`` leaves and ``_Category`` sub-trees of a ``_ConfigBase`` subclass), strict type checks,
attribute access that rejects unknown names with a "Did you mean ...?" hint, per-option metadata and
deprecation warnings, and serialisation to and from dicts and JSON.

:mod:`popjit.ipu.config` declares :class:`~popjit.ipu.config.IPUConfig` with it and re-exports the
public names defined here.
"""

from __future__ import annotations

import copy
import difflib
import enum
import json
import logging
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

log = logging.getLogger("popjit")

NO_DESCRIPTION = "No description provided."


class IPUConfigError(Exception):
    """A configuration that cannot be applied (Graphcore raises a bare ``Exception`` for these)."""


class InvalidConfigAttributeError(ValueError, AttributeError):
    """An unknown option or category name: a ``ValueError`` (as in Graphcore's SDK) that ``hasattr`` understands."""


# why: tracebacks name the errors as users import them (Graphcore's ipu.config), not this private module;
# the cost is that inspect.getsource cannot find their definitions
IPUConfigError.__module__ = InvalidConfigAttributeError.__module__ = "popjit.ipu.config"


# -- option types ----------------------------------------------------------------------------------


def type_name(t: Any) -> str:
    """A type as Graphcore's SDK prints it: ``int``, ``typing.Union[int, typing.List[int]]``."""
    origin = typing.get_origin(t)
    if origin is None:
        return "..." if t is Ellipsis else t.__name__
    prefix = {typing.Union: "typing.Union", list: "typing.List", tuple: "typing.Tuple"}[origin]
    args = typing.get_args(t)
    return f"{prefix}[{', '.join(type_name(a) for a in args)}]" if args else prefix


def matches_type(t: Any, value: Any) -> bool:
    """Strict check of ``value`` against ``t``: exact classes (``bool`` is not ``int``), Union, List, Tuple."""
    origin = typing.get_origin(t)
    if origin is None:
        return type(value) is t
    args = typing.get_args(t)
    if origin is typing.Union:
        return any(matches_type(a, value) for a in args)
    if type(value) is not origin:
        return False
    if not args:
        return True
    if origin is list:
        return all(matches_type(args[0], v) for v in value)
    if len(args) == 2 and args[1] is Ellipsis:
        return all(matches_type(args[0], v) for v in value)
    return len(value) == len(args) and all(matches_type(a, v) for a, v in zip(args, value))


# -- declarations ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Option:
    """A leaf: default value, description, type (default: the default's class) and deprecation."""

    default: Any
    doc: str = ""
    type: Any = None
    deprecated: str | None = None
    deprecated_use: Callable[[Any], str | None] | None = None  # deprecation that depends on the value


@dataclass(frozen=True)
class _Category:
    """A sub-tree of options."""

    cls: type[_ConfigBase]
    doc: str = ""
    deprecated: str | None = None


class AttributeMetadata:
    """What is known about one option or category: name, type, default, description, deprecation."""

    def __init__(self, name: str, doc: str = "", depth: int = 1, default: Any = None,
                 deprecated_msg: str | None = None, attr_type: Any = None) -> None:
        self._name = name
        self.__doc__ = doc.strip() or NO_DESCRIPTION
        self._depth = depth
        self._default = default
        self._deprecated_msg = deprecated_msg
        self._attr_type = attr_type

    @property
    def name(self) -> str:
        """The full dotted name, relative to the root of the config."""
        return self._name

    @property
    def deprecated(self) -> bool:
        """Whether this option (or a category above it) is deprecated."""
        return self._deprecated_msg is not None

    @property
    def deprecated_msg(self) -> str | None:
        """Why it is deprecated and what to use instead; None if it is not deprecated."""
        return self._deprecated_msg

    @property
    def type(self) -> str | None:
        """The accepted type as a string (``None`` for categories)."""
        return None if self._attr_type is None else type_name(self._attr_type)

    @property
    def default(self) -> Any:
        """The default value (``None`` for categories)."""
        return copy.deepcopy(self._default)

    @property
    def is_category(self) -> bool:
        return self._attr_type is None

    def check_type(self, value: Any) -> bool:
        """Raise ``TypeError`` unless ``value`` has this option's type; return True otherwise."""
        if self._attr_type is None or not matches_type(self._attr_type, value):
            raise TypeError(f"Trying to set {self._name} to {value}, but it must be of type {self.type}")
        return True

    def warn_if_deprecated(self) -> None:
        """Log ``{name} has been deprecated: {msg}`` if deprecated."""
        if self._deprecated_msg is not None:
            log.warning("%s has been deprecated: %s", self._name, self._deprecated_msg)

    def __repr__(self) -> str:
        return f"AttributeMetadata({self._name!r}, type={self.type!r}, default={self._default!r})"


# -- the tree mechanics ----------------------------------------------------------------------------


class _ConfigBase:
    """A node of the option tree. Subclasses declare ``_Option`` and ``_Category`` class attributes."""

    _fields: ClassVar[dict[str, _Option | _Category]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = {k: v for k, v in vars(cls).items() if isinstance(v, (_Option, _Category))}
        for k in fields:
            delattr(cls, k)
        cls._fields = fields

    def __init__(self, _prefix: str = "", _inherited: str | None = None, _root: _ConfigBase | None = None) -> None:
        object.__setattr__(self, "_meta", {})
        object.__setattr__(self, "_root", _root or self)
        depth = _prefix.count(".") + 1
        for name, field in self._fields.items():
            full = _prefix + name
            deprecated = field.deprecated or _inherited
            if isinstance(field, _Category):
                self._meta[name] = AttributeMetadata(full, field.doc, depth, None, deprecated, None)
                object.__setattr__(self, name, field.cls(full + ".", deprecated, _root or self))
            else:
                typ = field.type or type(field.default)
                self._meta[name] = AttributeMetadata(full, field.doc, depth, field.default, deprecated, typ)
                object.__setattr__(self, name, copy.deepcopy(field.default))

    # -- attribute access ----------------------------------------------------------------------
    def __getattr__(self, k: str) -> Any:
        if k.startswith("__") or "_meta" not in self.__dict__:
            raise AttributeError(k)
        raise self._unknown(k)

    def __setattr__(self, k: str, v: Any) -> None:
        md = self._meta.get(k)
        if md is None:
            raise self._unknown(k)
        if md.is_category:
            raise IPUConfigError(f"{md.name} is a category and cannot be assigned to.")
        md.check_type(v)
        md.warn_if_deprecated()
        use = self._fields[k].deprecated_use  # type: ignore[union-attr]
        note = use(v) if use is not None and not md.deprecated else None
        if note:
            log.warning("%s has been deprecated: %s", md.name, note)
        object.__setattr__(self, k, v)

    def __delattr__(self, k: str) -> None:
        raise IPUConfigError(f"Cannot delete {self._full_name(k)}: options keep their place in the config.")

    def _full_name(self, k: str) -> str:
        md = self._meta.get(k)
        return md.name if md is not None else k

    def _get_full_name(self, k: str) -> str:
        """The full dotted name of the option ``k`` of this category."""
        return self._meta[k].name

    def _unknown(self, k: str) -> InvalidConfigAttributeError:
        hint = _suggest(self, k)
        return InvalidConfigAttributeError(
            f"'{k}' is not a valid attribute of this config." + (f" Did you mean {hint}?" if hint else "")
        )

    # -- metadata ----------------------------------------------------------------------------------
    def get_attribute_metadata(self, attr: str) -> AttributeMetadata:
        """Metadata of ``attr``: a dotted name relative to this category (e.g. ``"ipu_model.version"``)."""
        try:
            node: _ConfigBase = self
            parts = attr.split(".")
            for part in parts[:-1]:
                node = getattr(node, part)
                if not isinstance(node, _ConfigBase):
                    raise InvalidConfigAttributeError(f"'{part}' is an option, not a category.")
            md = node._meta.get(parts[-1])
            if md is None:
                raise node._unknown(parts[-1])
            return md
        except ValueError as e:
            raise ValueError(f"Could not get attribute metadata for '{attr}': {e}") from None

    def _leaves(self) -> Iterator[tuple[_ConfigBase, str, AttributeMetadata]]:
        for name, md in self._meta.items():
            if md.is_category:
                yield from getattr(self, name)._leaves()
            else:
                yield self, name, md

    # -- serialisation -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every option as ``{full dotted name: value}``; enums become their integer values."""
        out = {}
        for node, name, md in self._leaves():
            value = getattr(node, name)
            out[md.name] = value.value if isinstance(value, enum.Enum) else copy.deepcopy(value)
        return out

    def from_dict(self, dct: dict[str, Any]) -> None:
        """Set options from a ``to_dict()``-shaped mapping. Every value is checked before any is set."""
        updates = []
        for node, name, md in self._leaves():
            if md.name not in dct:
                log.info("%s didn't have a value: the existing value will be retained", md.name)
                continue
            value = _from_plain(md, dct[md.name])
            md.check_type(value)
            if value != getattr(node, name):
                updates.append((node, name, value))
        _warn_unknown_keys(self, dct)
        for node, name, value in updates:
            setattr(node, name, value)

    def to_json(self) -> str:
        """The configuration as a JSON string (see :meth:`to_dict`)."""
        return json.dumps(self.to_dict())

    def from_json(self, json_cfg: str) -> None:
        """Set options from a JSON string made by :meth:`to_json`."""
        self.from_dict(json.loads(json_cfg))

    # -- copying and printing ----------------------------------------------------------------------
    def __deepcopy__(self, memo: dict[int, Any]) -> _ConfigBase:
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            object.__setattr__(new, k, copy.deepcopy(v, memo))
        return new

    def __str__(self) -> str:
        lines = []
        for node, name, md in self._leaves():
            value = getattr(node, name)
            lines.append(f"{md.name} = {value if isinstance(value, enum.Enum) else repr(value)}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        body = "\n".join("  " + line for line in str(self).splitlines())
        return f"{type(self).__name__}:\n{body}"


def _suggest(node: _ConfigBase, k: str) -> str:
    """``'ipu_model.version'`` for a misplaced or misspelt name, or '' when nothing is close."""
    root: _ConfigBase = node._root
    elsewhere = [md.name for _, name, md in root._leaves() if name == k]
    elsewhere += [md.name for n, md in _categories(root) if n == k]
    if elsewhere:
        return " or ".join(f"'{n}'" for n in elsewhere)
    close = difflib.get_close_matches(k, list(node._meta))
    if close:
        return f"'{node._meta[close[0]].name}'"
    leaves = {md.name.rsplit(".", 1)[-1]: md.name for _, _, md in root._leaves()}
    close = difflib.get_close_matches(k, list(leaves))
    return f"'{leaves[close[0]]}'" if close else ""


def _categories(node: _ConfigBase) -> Iterator[tuple[str, AttributeMetadata]]:
    for name, md in node._meta.items():
        if md.is_category:
            yield name, md
            yield from _categories(getattr(node, name))


def _from_plain(md: AttributeMetadata, value: Any) -> Any:
    """Turn a JSON-ish value back into an option value (enum from its int value or name, list → tuple stays)."""
    typ = md._attr_type
    enums = [t for t in (typing.get_args(typ) or (typ,)) if isinstance(t, type) and issubclass(t, enum.Enum)]
    if not enums or isinstance(value, (enum.Enum, bool)):
        return value
    enum_cls = enums[0]
    try:
        if isinstance(value, str):
            return enum_cls[value.rsplit(".", 1)[-1]]
        return enum_cls(value)
    except (KeyError, ValueError):
        valid = ", ".join(m.name for m in enum_cls)
        raise ValueError(f"{md.name}: {value!r} is not a {enum_cls.__name__} (valid: {valid}).") from None


def _warn_unknown_keys(root: _ConfigBase, dct: dict[str, Any]) -> None:
    known = {md.name for _, _, md in root._leaves()}
    for key in dct:
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            log.warning("'%s' is not an option of IPUConfig and was ignored.%s", key, hint)
