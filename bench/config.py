"""The knobs of one benchmark run, as a frozen dataclass checked on construction, and the two presets.

``cpu`` (default): the embedded SmolLM2-135M in fp32, contexts 1k–8k, SnapStream budget 1024 + ring 256.
``gpu``: a Llama-3.1-8B-shaped model with random weights in bf16 on CUDA, contexts 8k–128k, budget 4096 + ring 512,
time-boxed so that one command ends within about 8 minutes. Its first rep is a warm-up left out of the figures
(``discard_reps``): the first use of GPU memory slows the full-cache decodes of the first rep (bench/README.md, "GPU
mode").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from snapstream_core.methods import METHODS as REGISTRY

ATTNS = ("sdpa", "eager", "flash_attention_2")
DTYPES = ("float32", "bfloat16", "float16")
COMPILE_BACKENDS = ("inductor", "eager", "aot_eager")
# Model names besides the Hydra model configs (conf/model/<name>.yaml).
LLAMA_8B_SHAPE = "llama31_8b_shape"
WARM_STEPS = 4  # untimed decode steps per case before the ``steps`` timed ones
SHARED_KNOBS = ("prompt_budget", "recent", "window", "kernel", "sinks")  # what a method is built from


def registered() -> tuple[str, ...]:
    """Every method of ``snapstream_core.methods.METHODS`` (the default of ``methods`` and ``compiled``)."""
    return tuple(REGISTRY)


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark run.

    ``contexts`` are prompt lengths in tokens; each is cut to ``max positions - WARM_STEPS - steps - 1`` so that
    prompt and decoded tokens fit (SmolLM2: 8192 positions). ``steps`` decode steps are timed after the prefill (EOS is
    suppressed so that every run decodes exactly that many). ``methods`` are names in
    ``snapstream_core.methods.METHODS`` (default: all of them); each is built from :meth:`shared_knobs` by its
    class's ``from_bench`` (``bench.cases.build_method``), so the methods share one footprint: ``snapkv`` and
    ``snapstream`` keep ``prompt_budget`` prompt entries (``snapstream`` adds a ring of ``recent`` slots),
    ``streaming_llm`` keeps ``sinks`` + ``prompt_budget + recent - sinks`` entries (the same
    ``prompt_budget + recent`` slots as ``snapstream``).
    """

    device: str = "cpu"
    model: str = "smollm2_135m"
    dtype: str = "float32"
    attns: tuple[str, ...] = ("sdpa",)
    methods: tuple[str, ...] = field(default_factory=registered)
    compiled: tuple[str, ...] = field(default_factory=registered)  # also measured with the compiled decode step
    compile_backend: str = "inductor"  # torch.compile backend of that step ("eager": traced only, for quick checks)
    cpu_kernels: bool = True  # CPU: bench.cpu_decode's kernels in the compiled step, weights packed on huge pages
    contexts: tuple[int, ...] = (1024, 2048, 4096, 8192)
    steps: int = 64
    reps: int = 3
    prompt_budget: int = 1024
    recent: int = 256
    window: int = 32
    kernel: int = 7
    sinks: int = 4
    batches: tuple[int, ...] = (1, 4, 8)
    batch_context: int = 2048
    time_budget_s: float | None = None  # stop starting new measurements past this many seconds
    discard_reps: int = 0  # first reps measured but left out of the figures (warm-up)
    out: str = "bench/results"
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"bench.device: must be 'cpu' or 'cuda', got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"bench.dtype: must be one of {DTYPES}, got {self.dtype!r}")
        for attn in self.attns:
            if attn not in ATTNS:
                raise ValueError(f"bench.attns: {attn!r} is not one of {ATTNS}")
        for m in self.methods:
            if m not in REGISTRY:
                raise ValueError(f"bench.methods: {m!r} is not one of {registered()}")
        if self.compile_backend not in COMPILE_BACKENDS:
            raise ValueError(f"bench.compile_backend: must be one of {COMPILE_BACKENDS}, got {self.compile_backend!r}")
        for m in self.compiled:
            if m not in self.methods:
                raise ValueError(f"bench.compiled: {m!r} is not one of the run's methods {self.methods}")
        for name in ("steps", "reps", "prompt_budget", "recent", "window", "kernel", "batch_context"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"bench.{name}: must be a positive integer, got {value!r}")
        if not isinstance(self.discard_reps, int) or not 0 <= self.discard_reps < self.reps:
            raise ValueError(f"bench.discard_reps: must be in [0, reps), got {self.discard_reps!r}")
        if self.steps < 2:
            raise ValueError(f"bench.steps: need at least 2 decode steps to time, got {self.steps}")
        if not self.contexts or any(c < 16 for c in self.contexts):
            raise ValueError(f"bench.contexts: need prompt lengths >= 16 tokens, got {self.contexts!r}")
        if not self.batches or any(b < 1 for b in self.batches):
            raise ValueError(f"bench.batches: need batch sizes >= 1, got {self.batches!r}")
        if self.window + self.sinks >= self.prompt_budget:
            raise ValueError(
                f"bench.prompt_budget: must exceed window + sinks ({self.window} + {self.sinks}), "
                f"got {self.prompt_budget}"
            )

    def shared_knobs(self) -> dict[str, int]:
        """The budgets every method is built from (``CompressionMethod.from_bench``)."""
        return {name: getattr(self, name) for name in SHARED_KNOBS}

    @property
    def footprint(self) -> int:
        """KV slots per layer and KV head of ``snapstream`` and ``streaming_llm``."""
        return self.prompt_budget + self.recent

    def with_(self, **changes) -> BenchConfig:
        return replace(self, **changes)


def preset(device: str) -> BenchConfig:
    """The default configuration of a device (``cpu`` or ``cuda``)."""
    if device == "cpu":
        return BenchConfig()
    if device == "cuda":
        return BenchConfig(
            device="cuda",
            model=LLAMA_8B_SHAPE,
            dtype="bfloat16",
            contexts=(8192, 32768, 65536, 131072),
            steps=32,
            reps=3,
            discard_reps=1,
            prompt_budget=4096,
            recent=512,
            batch_context=32768,
            time_budget_s=450.0,
            out="bench/results/gpu",
        )
    raise ValueError(f"bench.device: must be 'cpu' or 'cuda', got {device!r}")


def parse_tokens(text: str) -> tuple[int, ...]:
    """``"1k,2k,4096"`` -> ``(1024, 2048, 4096)``."""
    out = []
    for part in str(text).split(","):
        part = part.strip().lower()
        if not part:
            continue
        try:
            out.append(int(float(part[:-1]) * 1024) if part.endswith("k") else int(part))
        except ValueError:
            raise ValueError(f"bench.contexts: cannot read {part!r} as a token count (e.g. 2048 or 2k)") from None
    return tuple(out)


def config_from_dict(data: dict[str, Any]) -> BenchConfig:
    """The inverse of ``dataclasses.asdict`` (JSON turns tuples into lists)."""
    data = dict(data)
    data.setdefault("compiled", ())  # a run config without the field measured no compiled case
    for name in ("attns", "methods", "compiled", "contexts", "batches"):
        if name in data:
            data[name] = tuple(data[name])
    return BenchConfig(**data)
