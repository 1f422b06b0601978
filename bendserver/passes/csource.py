"""C source for the native runs (:mod:`.native`): each operation of a run written out as loops
over float32 storage whose sizes, strides and offsets are constants of the source.

An operand is a pointer table entry plus a fixed layout (:class:`Operand`): the table holds the
storage each block reads and writes (weights, caches, the run's own buffers, its inputs), the
layout is what the graph's tensors always are at that block size. Loops over dimensions every
operand walks contiguously are merged, so the innermost loop is a plain stride-1 loop the
compiler vectorises. A matrix product with the weight's rows contiguous is a dot product per
output, each weight row read once for every row of the input (:data:`PRELUDE`).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

#: Helpers every source starts with, written with the compiler's vector types (eight floats)
#: so that they are vector code at ``-O2``. ``bs_dot`` keeps four vectors of partial sums (no
#: multiply-add waits for the one before) and adds them in a fixed order: the same source gives
#: the same bits on every call.
PRELUDE = r"""#include <math.h>
#include <stddef.h>
#include <string.h>

typedef float bs_v8 __attribute__((vector_size(32)));

static inline bs_v8 bs_load(const float *p) {
    bs_v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float bs_dot(const float *restrict x, const float *restrict y, long n) {
    bs_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    long k = 0;
    for (; k + 32 <= n; k += 32) {
        a0 += bs_load(x + k) * bs_load(y + k);
        a1 += bs_load(x + k + 8) * bs_load(y + k + 8);
        a2 += bs_load(x + k + 16) * bs_load(y + k + 16);
        a3 += bs_load(x + k + 24) * bs_load(y + k + 24);
    }
    for (; k + 8 <= n; k += 8) a0 += bs_load(x + k) * bs_load(y + k);
    bs_v8 s = (a0 + a1) + (a2 + a3);
    float sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; k < n; k++) sum += x[k] * y[k];
    return sum;
}

static inline float bs_sum8(bs_v8 s) {
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* out[i * step] = x . w[i * stride], i < 4: x read once for four rows of w */
static inline void bs_dot4(float *out, long step, const float *restrict x, const float *restrict w,
                           long stride, long n) {
    bs_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    long k = 0;
    for (; k + 8 <= n; k += 8) {
        const bs_v8 v = bs_load(x + k);
        a0 += v * bs_load(w + k);
        a1 += v * bs_load(w + stride + k);
        a2 += v * bs_load(w + 2 * stride + k);
        a3 += v * bs_load(w + 3 * stride + k);
    }
    float s0 = bs_sum8(a0), s1 = bs_sum8(a1), s2 = bs_sum8(a2), s3 = bs_sum8(a3);
    for (; k < n; k++) {
        s0 += x[k] * w[k];
        s1 += x[k] * w[stride + k];
        s2 += x[k] * w[2 * stride + k];
        s3 += x[k] * w[3 * stride + k];
    }
    out[0] = s0, out[step] = s1, out[2 * step] = s2, out[3 * step] = s3;
}

/* row[0:n] += x * w[0:n] */
static inline void bs_axpy(float *restrict row, float x, const float *restrict w, long n) {
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        bs_v8 r = bs_load(row + i) + x * bs_load(w + i);
        memcpy(row + i, &r, sizeof r);
    }
    for (; i < n; i++) row[i] += x * w[i];
}

/* out[m, n] = sum_k a[m, k] * b[k, n], all with element strides */
static void bs_mm(float *o, long os0, long os1, const float *a, long as0, long as1,
                  const float *b, long bs0, long bs1, long M, long K, long N) {
    if (as1 == 1 && bs0 == 1) {  /* a's rows and b's columns contiguous: a weight as stored */
        long n = 0;
        for (; n + 4 <= N; n += 4)  /* four weight rows streamed at once */
            for (long m = 0; m < M; m++)
                bs_dot4(o + m * os0 + n * os1, os1, a + m * as0, b + n * bs1, bs1, K);
        for (; n < N; n++)
            for (long m = 0; m < M; m++)
                o[m * os0 + n * os1] = bs_dot(a + m * as0, b + n * bs1, K);
        return;
    }
    if (bs1 == 1 && os1 == 1) {  /* b's rows contiguous: each read once, added into every row */
        for (long m = 0; m < M; m++)
            for (long n = 0; n < N; n++) o[m * os0 + n] = 0;
        for (long k = 0; k < K; k++)
            for (long m = 0; m < M; m++)
                bs_axpy(o + m * os0, a[m * as0 + k * as1], b + k * bs0, N);
        return;
    }
    for (long m = 0; m < M; m++)
        for (long n = 0; n < N; n++) {
            float sum = 0;
            for (long k = 0; k < K; k++) sum += a[m * as0 + k * as1] * b[k * bs0 + n * bs1];
            o[m * os0 + n * os1] = sum;
        }
}
"""


@dataclass(frozen=True)
class Operand:
    """A tensor as a run sees it: entry ``entry`` of the pointer table, ``offset`` elements on,
    with ``sizes`` and ``strides`` (in elements)."""

    entry: int
    offset: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def pointer(self) -> str:
        return f"(P[{self.entry}] + {self.offset})"

    def expanded(self, sizes: tuple[int, ...]) -> tuple[int, ...]:
        """Strides reading this operand broadcast to ``sizes`` (0 along broadcast dimensions)."""
        lead = len(sizes) - len(self.sizes)
        strides = [0] * lead
        for size, own, stride in zip(sizes[lead:], self.sizes, self.strides, strict=True):
            strides.append(0 if own == 1 and size != 1 else stride)
        return tuple(strides)


def literal(value: float) -> str:
    """``value`` rounded to float32, as an exact C literal."""
    rounded = struct.unpack("f", struct.pack("f", value))[0]
    if math.isnan(rounded):
        return "NAN"
    if math.isinf(rounded):
        return "INFINITY" if rounded > 0 else "-INFINITY"
    return f"{rounded.hex()}f"


def elementwise(out: Operand, inputs: list[Operand], expression: str) -> str:
    """A loop nest writing ``expression`` (of ``a0``, ``a1``... the inputs' elements) into
    every element of ``out``; inputs broadcast to its sizes."""
    walks = [out.strides, *(a.expanded(out.sizes) for a in inputs)]
    dims = _merged(out.sizes, walks)

    def index(operand: int) -> str:  # 0: out, then the inputs
        terms = [f"i{d} * {s[operand]}" for d, (_, s) in enumerate(dims) if s[operand]]
        return " + ".join(terms) or "0"

    lines = ["{", f"    float *o = {out.pointer()};"]
    lines += [f"    const float *p{i} = {a.pointer()};" for i, a in enumerate(inputs)]
    indent = "    "
    for depth, (size, _) in enumerate(dims):
        lines.append(f"{indent}for (long i{depth} = 0; i{depth} < {size}; i{depth}++)")
        indent += "    "
    body = [f"const float a{i} = p{i}[{index(i + 1)}];" for i in range(len(inputs))]
    body.append(f"o[{index(0)}] = {expression};")
    lines += [indent + "{ " + " ".join(body) + " }", "}"]
    return "\n".join(lines)


def _merged(
    sizes: tuple[int, ...], walks: list[tuple[int, ...]]
) -> list[tuple[int, tuple[int, ...]]]:
    """The loops over ``sizes`` as (size, each operand's stride), dimensions of size 1 left out
    and neighbours every operand walks as one merged."""
    dims = [(size, tuple(w[d] for w in walks)) for d, size in enumerate(sizes) if size != 1]
    merged: list[tuple[int, tuple[int, ...]]] = []
    for size, strides in dims:
        if merged:
            outer_size, outer = merged[-1]
            if all(o == s * size for o, s in zip(outer, strides, strict=True)):
                merged[-1] = (outer_size * size, strides)
                continue
        merged.append((size, strides))
    return merged


def matrix_product(out: Operand, a: Operand, b: Operand) -> str:
    """``out = a @ b`` for matrices."""
    (m, k), (_, n) = a.sizes, b.sizes
    arguments = [
        out.pointer(), *map(str, out.strides), a.pointer(), *map(str, a.strides),
        b.pointer(), *map(str, b.strides), str(m), str(k), str(n),
    ]  # fmt: skip
    return f"bs_mm({', '.join(arguments)});"


def batch_norm(
    out: Operand,
    x: Operand,
    mean: Operand,
    var: Operand,
    weight: Operand | None,
    bias: Operand | None,
    eps: float,
) -> str:
    """Batch normalisation with running statistics, channels along dimension 1: per channel
    ``x * alpha + beta``, ``alpha = weight / sqrt(var + eps)`` and ``beta = bias - mean *
    alpha``, as torch computes it on the CPU."""
    channels = x.sizes[1]
    scale = f"{weight.pointer()}[c * {weight.strides[0]}]" if weight else "1.0f"
    shift = f"{bias.pointer()}[c * {bias.strides[0]}]" if bias else "0.0f"
    per_channel = [
        f"const float invstd = 1.0f / sqrtf({var.pointer()}[c * {var.strides[0]}] + "
        f"{literal(eps)});",
        f"const float alpha = invstd * {scale};",
        f"const float beta = {shift} - {mean.pointer()}[c * {mean.strides[0]}] * alpha;",
    ]
    one = _channel(out), _channel(x)
    loop = elementwise(one[0], [one[1]], "a0 * alpha + beta")
    return "\n".join([f"for (long c = 0; c < {channels}; c++) {{", *per_channel, loop, "}"])


def _channel(operand: Operand) -> Operand:
    """``operand`` with dimension 1 fixed at channel ``c`` (written into the pointer)."""
    sizes = operand.sizes[:1] + (1,) + operand.sizes[2:]
    return _Shifted(operand.entry, operand.offset, sizes, operand.strides, operand.strides[1])


@dataclass(frozen=True)
class _Shifted(Operand):
    """An operand moved by ``step`` elements per channel ``c``."""

    step: int = 0

    def pointer(self) -> str:
        return f"(P[{self.entry}] + {self.offset} + c * {self.step})"


def function(name: str, statements: list[str]) -> str:
    """A C function ``name(float **P)`` running ``statements`` in order."""
    body = "\n".join("    " + line for s in statements for line in s.splitlines())
    return f"void {name}(float **P) {{\n{body}\n}}\n"
