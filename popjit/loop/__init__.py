"""The loop IR: flat buffers, fused loop nests with index expressions, control statements; lowering
from the graph IR, passes, printer and interpreter."""
