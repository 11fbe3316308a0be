"""The shapes the GPU check's stages run: Llama-3.1-8B's architecture on CUDA, a 2-layer model with ``--tiny``."""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30
TINY_ARCH = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=8192, tie_word_embeddings=False)
LLAMA_8B_ARCH = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
                     rope_theta=500000.0, tie_word_embeddings=False)
R1_SAMPLING = dict(temperature=0.6, top_p=0.95)  # top-p on: the sampler must not read the device either


@dataclass(frozen=True)
class Shape:
    """``compression`` on a ``prompt``-token prompt, ``steps`` decode steps per row, at the rows the planner gives
    the job (``job_prompt`` tokens, ``job_new`` new tokens, ``job_samples`` samples)."""

    compression: dict
    prompt: int
    steps: int
    job_prompt: int
    job_new: int
    job_samples: int
    fill_to_job_slots: bool = False  # prompt = the job's slots - steps (an appending row as full as the job's)


@dataclass(frozen=True)
class AgreementShape:
    """The greedy token-agreement check of a stage: a ``prompt``-token prompt, ``new`` tokens."""

    prompt: int
    new: int


SNAP_8B = {"method": "snapstream", "prompt_budget": 1024, "recent": 1024, "window": 32}
SNAP_TINY = {"method": "snapstream", "prompt_budget": 128, "recent": 32, "window": 16}
SHAPES: dict[str, tuple[Shape, Shape]] = {  # name: (8B on CUDA, --tiny)
    "snapstream_decode": (Shape(SNAP_8B, 2048, 64, 400, 32768, 1920), Shape(SNAP_TINY, 256, 8, 64, 512, 60)),
    "full_decode": (Shape({"method": "none"}, 0, 64, 400, 32768, 1920, True),
                    Shape({"method": "none"}, 0, 8, 64, 512, 60, True)),
    "block_mask": (Shape({"method": "none"}, 0, 64, 400, 32768, 1920, True),
                   Shape({"method": "none"}, 0, 8, 64, 512, 60, True)),
    "prefill_120k": (Shape({"method": "none"}, 120_000, 1, 120_000, 1, 1),
                     Shape({"method": "none"}, 2048, 1, 2048, 1, 1)),
    "equal_memory_full": (Shape({"method": "none"}, 128_000, 32, 128_000, 32, 64),
                          Shape({"method": "none"}, 1024, 8, 1024, 8, 4)),
    "equal_memory_snapstream": (Shape(SNAP_8B, 128_000, 32, 128_000, 32, 1024), Shape(SNAP_TINY, 1024, 8, 1024, 8, 4)),
    "compaction": (Shape({"method": "rkv", "budget": 512, "interval": 128}, 2048, 384, 400, 32768, 1920),
                   Shape({"method": "rkv", "budget": 32, "interval": 8}, 128, 24, 64, 512, 60)),
}
# 8B, --tiny: at most the decode stage's steps + 1 new tokens, so the greedy requests reuse its compiled graph
AGREEMENT: tuple[AgreementShape, AgreementShape] = (AgreementShape(256, 64), AgreementShape(48, 8))


def shape_of(name: str, tiny: bool) -> Shape:
    return SHAPES[name][1 if tiny else 0]
