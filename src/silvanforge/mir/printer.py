"""MIR as MLIR-like text: one op per line, nested bodies indented.

>>> print(print_mir(fn))                                    # doctest: +SKIP
func @predict(T = 4, n_outputs = 1) {
  %result = alloc memref<N x n_outputs x f64>
  for %tree = 0 to 4 step 1 {
    for %batch = 0 to N step 1 {
      %leaf = walk tree(tree) row(batch)
      reduce %result[batch, output(tree)] += %leaf <"+", 0.0>
"""

from __future__ import annotations

from .ir import (CacheRows, CacheTrees, Function, Guard, InterleavedWalk, Loop, Op, Reduce,
                 ReduceDimension, ReduceDimensionInplace, Walk)


def print_mir(fn: Function) -> str:
    """The whole function as text."""
    lines = [f"func @{fn.name}(T = {fn.n_trees}, n_outputs = {fn.n_outputs}) {{"]
    for b in fn.buffers:
        lines.append(f"  %{b.name} = alloc memref<{' x '.join(map(str, b.dims))} x f64>")
    _body(fn.body, 1, lines)
    lines.append("}")
    return "\n".join(lines)


def _attrs(**values) -> str:
    shown = [f"{k} = {v}" if v is not True else k for k, v in values.items() if v]
    return f" <{', '.join(shown)}>" if shown else ""


def _rows(r) -> str:
    return f"rows [{r[0]}, {r[1]})"


def _body(ops: tuple[Op, ...], depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    for op in ops:
        if isinstance(op, Loop):
            head = "parallel for" if op.parallel else "for"
            lines.append(f"{pad}{head} %{op.var} = {op.lower} to {op.upper} step {op.step}"
                         f" : {op.kind}" + _attrs(offset=op.offset, gpu=op.gpu_dim,
                                                  cache=op.cache,
                                                  atomic_reduce=op.atomic_reduce,
                                                  vector_reduce=op.vector_reduce,
                                                  shared_reduce=op.shared_reduce) + " {")
            _body(op.body, depth + 1, lines)
            lines.append(pad + "}")
        elif isinstance(op, Guard):
            lines.append(f"{pad}if {op.cond} {{")
            _body(op.body, depth + 1, lines)
            lines.append(pad + "}")
        elif isinstance(op, Walk):
            lines.append(f"{pad}%{op.result} = walk tree({op.tree}) row({op.row})"
                         + _attrs(unroll_depth=op.unroll_depth, peel_depth=op.peel_depth))
        elif isinstance(op, InterleavedWalk):
            lines.append(f"{pad}interleaved_walk" + _attrs(
                unroll_depth=op.unroll_depth, peel_depth=op.peel_depth, lanes=op.lanes)
                + " {")
            for m in op.members:
                when = f" if {m.valid}" if m.valid else ""
                lines.append(f"{pad}  %{m.result} = walk tree({m.tree}) row({m.row}){when}")
            lines.append(pad + "}")
        elif isinstance(op, Reduce):
            index = ", ".join([*map(str, op.privatized), str(op.row), f"output({op.tree})"])
            when = f" if {op.valid}" if op.valid else ""
            lines.append(f"{pad}reduce %{op.target}[{index}] += %{op.value}{when}"
                         f' <"{op.op}", {op.init}>' + _attrs(atomic=op.atomic))
        elif isinstance(op, ReduceDimension):
            lines.append(f"{pad}%{op.target} += reduce_dimension(%{op.source}, {op.dim}, "
                         f"[{', '.join(map(str, op.indices))}], {_rows(op.rows)})"
                         + _attrs(vector_width=op.vector_width, shared=op.shared))
        elif isinstance(op, ReduceDimensionInplace):
            lines.append(f"{pad}reduce_dimension_inplace(%{op.buffer}, {op.dim}, "
                         f"[{', '.join(map(str, op.indices))}], {_rows(op.rows)})"
                         + _attrs(vector_width=op.vector_width, shared=op.shared))
        elif isinstance(op, (CacheRows, CacheTrees)):
            name = "cache_rows" if isinstance(op, CacheRows) else "cache_trees"
            lines.append(f"{pad}{name}[{op.lower}, {op.upper})"
                         + _attrs(lanes=getattr(op, "lanes", 0)))
        else:
            raise TypeError(f"not a MIR op: {op!r}")
