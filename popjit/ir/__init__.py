"""The bottom layer's data structures: the graph IR, the loop IR and the op definition type.

    graph.py / graph_printer.py   SSA ops with static shapes, regions for control flow
    loop.py / loop_printer.py     flat buffers, loop nests with index expressions, control statements
    loop_visit.py                 visitors and mutators over the loop IR
    lazy.py                       tensors while lowering: index-space expression builders
    opdef.py                      ``OpDef``: everything popjit knows about one op, and the registry dict

Nothing here imports another popjit layer; every layer above builds on these.
"""
