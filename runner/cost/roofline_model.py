"""What a decode pass costs on the roofline: the bytes it moves and the multiply-adds it does,
counted exactly from the model shape and the impl, and the time a machine's measured roof
(runner.cost.machine_profile) allows for them.

A *pass* feeds ``positions`` new tokens after ``start`` cached ones (a decode step is one
position; a speculative verification k + 1; a no-cache step the whole sequence from 0). Counted:

- flops: multiply-adds × 2 of the four linear layers of every block (12·d² per position), the
  attention scores and weighted sums (d per seen position each; the fast path does the causal
  triangle, eager attention the whole m × (start + m) rectangle, masked) and the tied lm head
  (vocab·d per position: every impl computes logits for every position of a pass). LayerNorm,
  GELU and softmax do no multiply-adds against weights and are left out.
- bytes: every parameter once per pass at its stored precision (the fast path's packed layout:
  rows padded to a whole vector, per-row scales and offsets for int8; the lm head is float32 in
  every format), the embedding rows of the fed tokens, the K/V cache read once per pass, the new
  K/V written (the naive impl's torch.cat also copies the whole cache, read and written, every
  step). Activations stay in L1 and are not counted.
- working set: the parameters and the K/V cache at the end of the pass: what must stay close for
  the next pass to find it; the cache level holding it sets the bandwidth.

The roofline time of a pass is max(bytes ÷ bandwidth at its working set, Σ flops ÷ peak of
their precision), what ``roof_fraction`` divides by the measured time; the prediction is the
impl's fitted per-pass overhead (the ``overhead`` experiment's intercept) plus both times added
(Placement.predicted_seconds says why), and a pass is overhead-bound when that overhead exceeds
its roofline time.

An overhead-bound pass of an impl other than ``fast`` (eager PyTorch: a few percent of the roof
at these widths) is priced by the overhead fit itself, a + b · multiplications (``b`` the price
eager pays per multiplication, tens of times the roof's), since the roof's times would put it at
5–10% of its measured time. The fit is made on one-position steps, so an eager pass of several
positions (a no-cache step, a verification), an eager step with no fit yet, or one whose fit
misses its own points by more than FIT_LIMIT (eager timings on a 2-core VM: the EPYC's quick run
fitted naive and static within 68% and 44%) gets no prediction: the placement says which
(``WITHHELD_REASONS``) instead of storing a −90% error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

# The memory levels a working set may sit in, nearest first: the probe measures each, a figure
# is placed at one (its code, 1 to 4, is the stored cache_level metric).
LEVELS = ("L1", "L2", "L3", "DRAM")

PRECISIONS = ("fp32", "bf16", "int8")
WEIGHT_BYTES = {"fp32": 4, "bf16": 2, "int8": 1}
REGIMES = ("memory-bound", "compute-bound", "overhead-bound")  # stored as their index (unit "regime")
FLOAT_BYTES = 4
# Why a placement stores no prediction (stored as the index, unit "reason").
WITHHELD_REASONS = (
    "no overhead fit yet: an eager step is overhead-bound and the roof alone prices it at a few percent of its time",
    "an eager pass of several positions: the overhead fit prices one-position steps only",
    "the overhead fit misses its own points by more than FIT_LIMIT: a prediction from it could not be closer",
)
NO_OVERHEAD_FIT, EAGER_MULTI_POSITION, FIT_MISSES = range(len(WITHHELD_REASONS))
FIT_LIMIT = 0.25  # the largest |error| of the overhead fit on its own points that it may predict with
# Impls the roof's times predict (their per-pass overhead added); every other is priced by its fit.
ROOF_PRICED_IMPLS = ("fast",)


@dataclass(frozen=True)
class Shape:
    vocab: int
    d_model: int
    layers: int
    heads: int

    @classmethod
    def of(cls, config: Any) -> Shape:
        """From a runner.model.gpt.ModelConfig (or anything with its field names)."""
        return cls(config.vocab_size, config.d_model, config.n_layer, config.n_head)


@dataclass(frozen=True)
class Cost:
    """Bytes and flops of one or more passes; flops by the precision of the units doing them."""

    bytes_moved: int
    flops: dict[str, int] = field(default_factory=dict)
    working_set_bytes: int = 0
    positions: int = 1  # new positions the pass feeds (the most of any pass added in)

    @property
    def total_flops(self) -> int:
        return sum(self.flops.values())

    def __add__(self, other: Cost) -> Cost:
        flops = {key: self.flops.get(key, 0) + other.flops.get(key, 0) for key in {*self.flops, *other.flops}}
        return Cost(
            self.bytes_moved + other.bytes_moved,
            flops,
            max(self.working_set_bytes, other.working_set_bytes),
            max(self.positions, other.positions),
        )


def beside(cost: Cost, other_working_set_bytes: int) -> Cost:
    """The same pass with another model's working set sharing the caches (a speculative loop runs
    its target and its draft through one set): what it reads now comes from the level that holds both."""
    return replace(cost, working_set_bytes=cost.working_set_bytes + other_working_set_bytes)


def padded(rows: int, lanes: int) -> int:
    return (rows + lanes - 1) // lanes * lanes


def linear_bytes(rows: int, cols: int, precision: str, fast: bool, lanes: int) -> int:
    """One linear layer's weight, bias and (int8) per-row scales as one pass reads them."""
    if fast:
        per_word = 4 // WEIGHT_BYTES[precision]  # columns in one 32-bit word (runner/decoding/csrc/linear.h)
        words = (cols + per_word - 1) // per_word
        weights = words * padded(rows, lanes) * 4
        extras = rows * FLOAT_BYTES * (3 if precision == "int8" else 1)  # bias (+ scales and offsets)
    else:
        weights = rows * cols * WEIGHT_BYTES[precision]
        extras = rows * FLOAT_BYTES * (2 if precision == "int8" else 1)  # bias (+ scales)
    return weights + extras


def parameter_bytes(shape: Shape, impl: str, precision: str, lanes: int = 16) -> int:
    """Every parameter a pass reads once, at its stored precision (embedding rows apart)."""
    d, fast = shape.d_model, impl == "fast"
    block = sum(
        linear_bytes(rows, cols, precision, fast, lanes) for rows, cols in ((3 * d, d), (d, d), (4 * d, d), (d, 4 * d))
    )
    block += 4 * d * FLOAT_BYTES  # two LayerNorms' weights and biases
    head = linear_bytes(shape.vocab, d, "fp32", fast, lanes) if fast else shape.vocab * d * FLOAT_BYTES
    return shape.layers * block + head + 2 * d * FLOAT_BYTES  # + the final LayerNorm


def cache_bytes(shape: Shape, positions: int) -> int:
    """K and V of every layer for ``positions`` positions, float32."""
    return 2 * shape.layers * positions * shape.d_model * FLOAT_BYTES


def pass_cost(shape: Shape, impl: str, precision: str, positions: int, start: int, lanes: int = 16) -> Cost:
    """One pass of ``positions`` new tokens after ``start`` cached ones (see the module doc)."""
    if positions < 1 or start < 0:
        raise ValueError(f"a pass feeds at least one position after zero or more (got {positions}, {start})")
    d, layers = shape.d_model, shape.layers
    end = start + positions
    linear_macs = positions * 12 * d * d * layers
    if impl == "fast":
        seen = positions * start + positions * (positions + 1) // 2  # causal: position j sees start + j + 1
    else:
        seen = positions * end  # the masked rectangle
    attention_macs = 2 * d * seen * layers
    head_macs = positions * shape.vocab * d
    flops = {precision: 2 * linear_macs}  # the blocks' linears in their precision; the rest float32
    flops["fp32"] = flops.get("fp32", 0) + 2 * (attention_macs + head_macs)
    parameters = parameter_bytes(shape, impl, precision, lanes)
    embeddings = 2 * positions * d * FLOAT_BYTES
    cache_read = cache_bytes(shape, end)
    cache_written = cache_bytes(shape, positions)
    if impl == "naive":
        cache_written += cache_bytes(shape, start) + cache_bytes(shape, end)  # torch.cat: read all, write all
    moved = parameters + embeddings + cache_read + cache_written
    return Cost(moved, flops, parameters + cache_bytes(shape, end), positions)


def generation_cost(
    shape: Shape, impl: str, precision: str, prompt_tokens: int, new_tokens: int, cached: bool, lanes: int = 16
) -> list[Cost]:
    """Every pass of a generation of ``new_tokens`` after a prompt: with the cache the prompt's
    pass then one position per step; without it the whole sequence every step."""
    if cached:
        return [pass_cost(shape, impl, precision, prompt_tokens, 0, lanes)] + [
            pass_cost(shape, impl, precision, 1, prompt_tokens + step - 1, lanes) for step in range(1, new_tokens)
        ]
    return [pass_cost(shape, impl, precision, prompt_tokens + step, 0, lanes) for step in range(new_tokens)]


# The quick preset's model on the default corpus (the decode the benchmarks and the roofline's
# figures are about) and its small draft (the speculative experiment's ``small``: one block).
QUICK_SHAPE = Shape(vocab=103, d_model=128, layers=3, heads=4)
QUICK_SMALL_DRAFT_SHAPE = Shape(vocab=103, d_model=64, layers=1, heads=4)
# Cached positions at which a decode's working set is measured: a generation's start, middle and
# end, and a long one's (the K/V cache grows the working set by 6·d bytes·layers per position).
DECODE_POSITIONS = (0, 128, 256, 512)


def decode_working_sets(
    shapes: dict[str, Shape] | None = None, positions: tuple[int, ...] = DECODE_POSITIONS
) -> dict[str, int]:
    """The working sets a fast-path decode step of each model and precision has after ``positions``
    cached tokens (parameters + K/V cache, what ``pass_cost`` reports), by name
    (``quick_fp32_at_128``): the sizes a machine profile measures its bandwidth at, so the roof of
    a decode on the L2 → L3 cliff is read there, not interpolated across it."""
    shapes = shapes if shapes is not None else {"quick": QUICK_SHAPE, "small_draft": QUICK_SMALL_DRAFT_SHAPE}
    sizes: dict[str, int] = {}
    for name, shape in shapes.items():
        for precision in PRECISIONS:
            for position in positions:
                sizes[f"{name}_{precision}_at_{position}"] = pass_cost(
                    shape, "fast", precision, 1, position
                ).working_set_bytes
    return sizes


def level_of(working_set_bytes: int, caches: dict[str, int]) -> str:
    """The nearest level whose capacity holds the working set."""
    for level in LEVELS[:-1]:
        if working_set_bytes <= caches[level]:
            return level
    return "DRAM"


def bandwidth_at(working_set_bytes: int, sweep: list[dict[str, float]]) -> float:
    """One thread's read bandwidth at this working set: the profile's figure where it measured
    this size, else its sweep interpolated on log-log axes (its end values beyond its range)."""
    points = sorted((row["working_set_bytes"], row["bytes_per_second"]) for row in sweep)
    for size, rate in points:
        if size == working_set_bytes:
            return rate  # a measured size (the decode's own working sets): its figure, not interpolated
    if working_set_bytes <= points[0][0]:
        return points[0][1]
    for (size_low, rate_low), (size_high, rate_high) in zip(points, points[1:], strict=False):
        if working_set_bytes <= size_high:
            fraction = math.log(working_set_bytes / size_low) / math.log(size_high / size_low)
            return math.exp(math.log(rate_low) + fraction * (math.log(rate_high) - math.log(rate_low)))
    return points[-1][1]


@dataclass(frozen=True)
class Placement:
    """Passes placed on a roof: their counts, the roofline's time and regime, and the prediction."""

    bytes_moved: int
    flops: int
    working_set_bytes: int
    level: str
    memory_seconds: float  # Σ bytes ÷ bandwidth over the passes
    compute_seconds: float  # Σ flops ÷ peak over the passes
    roofline_seconds: float  # Σ over the passes of the slower of the two
    overhead_seconds: float
    # Σ over overhead-bound passes priced by the fit of (a + b · mults) − (a + memory + compute):
    # what the fit's price per multiplication adds where it, not the roof, sets the time.
    fit_excess_seconds: float = 0.0
    withheld: int | None = None  # an index of WITHHELD_REASONS: no prediction, and why

    @property
    def predicted_seconds(self) -> float:
        """The overhead plus memory and compute time added, not overlapped: the fast path's
        kernels load a weight vector and then issue its multiply-adds, and at these sizes the two
        barely overlap (on the second machine's benchmark figures the sum predicts the fast fp32
        step, the int8 step and a 5-position verification within 0–12%, the maximum within 7–30%).
        An eager impl's overhead-bound steps are the fit's a + b · mults instead (the module doc).
        NaN where the prediction is withheld."""
        if self.withheld is not None:
            return math.nan
        return self.overhead_seconds + self.memory_seconds + self.compute_seconds + self.fit_excess_seconds

    @property
    def regime(self) -> str:
        return regime(self.memory_seconds, self.compute_seconds, self.overhead_seconds)


def regime(memory_seconds: float, compute_seconds: float, overhead_seconds: float) -> str:
    """Overhead-bound when the fixed per-pass cost exceeds the roofline time, else whichever of
    memory and compute takes longer (a tie counts as memory-bound)."""
    if overhead_seconds > max(memory_seconds, compute_seconds):
        return "overhead-bound"
    return "memory-bound" if memory_seconds >= compute_seconds else "compute-bound"


def place(
    passes: list[Cost],
    roof: dict[str, Any],
    overhead_seconds_per_pass: float = 0.0,
    threads: int = 1,
    impl: str = "fast",
    seconds_per_mult: float | None = None,
    fit_error: float = 0.0,
) -> Placement:
    """Passes on a profile's roof; each pass is bounded by its own slower side, the times summed.
    ``impl`` other than ROOF_PRICED_IMPLS: overhead-bound one-position passes priced by the
    overhead fit (``overhead_seconds_per_pass`` and ``seconds_per_mult``; None: no fit), withheld
    where there is no fit, where ``fit_error`` (its largest |error| on its own points) exceeds
    FIT_LIMIT, or for a pass of several positions (the module doc)."""
    # The roof is the best repeat of each micro-kernel (runner.cost.machine_profile says why).
    peaks = {precision: rates["high"] for precision, rates in roof["peak_operations_per_second"].items()}
    memory = compute = roofline = excess = 0.0
    withheld: int | None = None
    fit_priced = impl not in ROOF_PRICED_IMPLS
    if fit_priced and seconds_per_mult is None:
        withheld = NO_OVERHEAD_FIT
    elif fit_priced and fit_error > FIT_LIMIT:
        withheld = FIT_MISSES
    for cost in passes:
        bandwidth = bandwidth_at(cost.working_set_bytes, roof["sweep"])
        if threads > 1:
            level = roof["bandwidth"][level_of(cost.working_set_bytes, roof["caches"])]
            bandwidth *= level["all_threads"]["high"] / level["one_thread"]["high"]
        pass_memory = cost.bytes_moved / bandwidth
        pass_compute = sum(flops / (peaks[precision] * threads) for precision, flops in cost.flops.items())
        memory += pass_memory
        compute += pass_compute
        roofline += max(pass_memory, pass_compute)
        if not fit_priced or withheld is not None:
            continue
        if cost.positions > 1:
            withheld = EAGER_MULTI_POSITION
        elif seconds_per_mult is not None and overhead_seconds_per_pass > max(pass_memory, pass_compute):
            by_fit = overhead_seconds_per_pass + seconds_per_mult * cost.total_flops / 2
            excess += by_fit - (overhead_seconds_per_pass + pass_memory + pass_compute)
    working_set = max(cost.working_set_bytes for cost in passes)
    return Placement(
        bytes_moved=sum(cost.bytes_moved for cost in passes),
        flops=sum(cost.total_flops for cost in passes),
        working_set_bytes=working_set,
        level=level_of(working_set, roof["caches"]),
        memory_seconds=memory,
        compute_seconds=compute,
        roofline_seconds=roofline,
        overhead_seconds=overhead_seconds_per_pass * len(passes),
        fit_excess_seconds=excess,
        withheld=withheld,
    )
