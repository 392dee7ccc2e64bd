"""Graph-IR passes: each is a plain ``graph -> graph`` function (``plan_fusion`` returns a plan)."""

from popjit.graph.passes.accumulate import accumulate_blocks
from popjit.graph.passes.const_fold import const_fold
from popjit.graph.passes.conv_gradient import convolve_input_gradients
from popjit.graph.passes.cse import cse
from popjit.graph.passes.dce import dce
from popjit.graph.passes.fusion import FusionPlan, plan_fusion
from popjit.graph.passes.replays import merge_replayed_loops

__all__ = [
    "FusionPlan", "accumulate_blocks", "const_fold", "convolve_input_gradients", "cse", "dce", "merge_replayed_loops",
    "plan_fusion",
]
