"""Write docs/reference.md from the code: the TensorFlow functions, the registry ops, the IPUConfig
options and the TF_POPLAR_FLAGS. ``tests/test_docs.py`` fails when the committed file is stale.

    python docs/make_reference.py
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from types import ModuleType

import popjit.compat.v1
import popjit.tensorflow as tf
from popjit import flags, ipu
from popjit.ops import all_ops
from popjit.support import stub_name

OUT = Path(__file__).with_name("reference.md")
NAMESPACES = ["tf", "tf.math", "tf.nn", "tf.linalg", "tf.random", "tf.bitwise", "tf.nest", "tf.autograph",
              "tf.errors", "tf.dtypes", "tf.train", "tf.compat.v1", "tf.compat.v1.train", "tf.compat.v1.layers",
              "tf.compat.v1.losses", "tf.compat.v1.metrics", "tf.compat.v1.summary", "tf.compat.v1.data",
              "tf.compat.v1.estimator"]


def _first_line(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0].replace("|", "\\|") if doc.strip() else ""


def _namespace(path: str) -> ModuleType:
    mod: object = tf
    for part in path.split(".")[1:]:
        mod = getattr(mod, part)
    return mod  # type: ignore[return-value]


def _public(mod: ModuleType) -> list[str]:
    names = getattr(mod, "__all__", None) or dir(mod)
    return sorted(n for n in names if not n.startswith("_") and n != "annotations"
                  and not inspect.ismodule(getattr(mod, n, None)) and stub_name(getattr(mod, n, None)) is None)


def tensorflow_section() -> list[str]:
    out = ["## TensorFlow API (`import popjit.tensorflow as tf`)", ""]
    for path in NAMESPACES:
        # why: tf.compat.v1 also answers every TF2 name (listed under `tf`); list TF1's own names only
        mod = popjit.compat.v1 if path == "tf.compat.v1" else _namespace(path)
        out.append(f"**`{path}`**: " + ", ".join(f"`{n}`" for n in _public(mod) if n != "graph_mode_message"))
        out.append("")
    return out


#: Graphcore's op and Keras modules as users spell them, and popjit's module behind each.
GRAPHCORE_MODULES = {
    "ipu.nn_ops": "popjit.ipu.ops.nn_ops", "ipu.rand_ops": "popjit.ipu.ops.rand_ops",
    "ipu.embedding_ops": "popjit.ipu.ops.embedding_ops", "ipu.math_ops": "popjit.ipu.ops.math_ops",
    "ipu.optimizers": "popjit.ipu.optimizers", "ipu.gradient_accumulation": "popjit.ipu.gradient_accumulation",
    "ipu.keras": "popjit.ipu.keras", "ipu.keras.layers": "popjit.ipu.keras.layers",
    "ipu.keras.optimizers": "popjit.ipu.keras.optimizers", "keras.ipu": "popjit.tensorflow.keras.ipu",
    "keras.ipu.layers": "popjit.tensorflow.keras.ipu.layers",
    "ipu_tensorflow_addons.keras.layers": "popjit.ipu_tensorflow_addons.keras.layers",
    "ipu_tensorflow_addons.keras.optimizers": "popjit.ipu_tensorflow_addons.keras.optimizers",
    "ipu.distributed": "popjit.ipu.distributed",
    "ipu.distributed.popdist_strategy": "popjit.ipu.distributed.popdist_strategy",
    "popdist": "popjit.popdist", "popdist.tensorflow": "popjit.popdist.tensorflow",
}


def graphcore_section() -> list[str]:
    out = ["## Graphcore's op and Keras modules", "",
           "`ipu` is `from tensorflow.python import ipu` (`ipu.nn_ops` is also `ipu.ops.nn_ops`...); `keras.ipu`, "
           "`ipu_tensorflow_addons` and `popdist` are modules `popjit run` maps for a script. The multi-IPU names "
           "(`PipelineStage`, `PipelineModel`...) are listed but raise `UnimplementedError` when used.", ""]
    for path, module in GRAPHCORE_MODULES.items():
        names = [n for n in _public(importlib.import_module(module)) if n != "annotations"]
        out.append(f"**`{path}`**: " + ", ".join(f"`{n}`" for n in names))
        out.append("")
    return out


def ops_section() -> list[str]:
    out = ["## Registry ops (graph IR)", "",
           "Each is defined once in `popjit/ops/` with its shape rule, NumPy reference, lowering and cost.", "",
           "| op | kind | dtypes | notes |", "|---|---|---|---|"]
    for name, op in sorted(all_ops().items()):
        dts = ", ".join(d.name for d in op.extra.get("dtypes", ()))
        out.append(f"| `{name}` | {op.kind} | {dts} | {op.doc.replace('|', chr(92) + '|')} |")
    return [*out, ""]


def config_section() -> list[str]:
    cfg = ipu.config.IPUConfig()
    out = ["## `ipu.config.IPUConfig` options", "", "| option | type | default | meaning |", "|---|---|---|---|"]
    for name in sorted(cfg.to_dict()):
        meta = cfg.get_attribute_metadata(name)
        default = repr(meta.default).replace("|", "\\|")
        doc = " ".join((meta.__doc__ or "").split()).replace("|", "\\|")
        out.append(f"| `{name}` | `{meta.type}` | `{default}` | {doc} |")
    return [*out, ""]


def flags_section() -> list[str]:
    out = ["## `TF_POPLAR_FLAGS`", "", "Parsed strictly: an unknown flag is an error that names it and lists these.",
           "", "```", flags.usage().rstrip(), "```", "", "Flags popjit accepts but has no use for:", ""]
    for name, note in sorted(flags.NOTES.items()):
        out.append(f"- `--{name}`: {note}")
    return [*out, ""]


def reference() -> str:
    head = ["# Reference", "", "Generated by `python docs/make_reference.py` from the code; do not edit by hand.", ""]
    return "\n".join(head + tensorflow_section() + graphcore_section() + ops_section() + config_section() +
                     flags_section())


if __name__ == "__main__":
    OUT.write_text(reference())
    print(f"wrote {OUT}")
