"""One compression method, one dataclass of its knobs (docs/architecture.md, "Compression config").

Adding a method: one file here with a frozen dataclass subclassing :class:`CompressionMethod` (its fields are its
knobs, each with a default, checked in ``__post_init__``) and one line in :data:`METHODS`. The rest follows from
the fields: the Hydra option ``compression=<name>`` with its run tag (``evals/config/conf_store.py``; a
``conf/compression/<name>.yaml`` is optional and then checked against it by ``tests/test_conf_defaults.py``), the
result-row and summary columns and report labels (:func:`knob_names`), lm-eval ``model_args``, and bench cases
(:meth:`CompressionMethod.from_bench`).
"""

from dataclasses import fields

from snapstream_core.methods.adakv import AdaKV
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.methods.decode_base import DecodeMethod
from snapstream_core.methods.expected_attention import ExpectedAttention
from snapstream_core.methods.h2o import H2O
from snapstream_core.methods.keydiff import KeyDiff
from snapstream_core.methods.kivi import Kivi
from snapstream_core.methods.knorm import Knorm
from snapstream_core.methods.none import NoCompression
from snapstream_core.methods.pyramidkv import PyramidKV
from snapstream_core.methods.random_evict import RandomEvict
from snapstream_core.methods.rkv import RKV
from snapstream_core.methods.snapkv import SnapKV
from snapstream_core.methods.snapkv_decode import SnapKVDecode
from snapstream_core.methods.snapstream import SnapStream
from snapstream_core.methods.streaming_llm import StreamingLLM
from snapstream_core.methods.tova import TOVA
from snapstream_core.methods.triattention import TriAttention

METHODS: dict[str, type[CompressionMethod]] = {
    "none": NoCompression,
    "snapkv": SnapKV,
    "streaming_llm": StreamingLLM,
    "snapstream": SnapStream,
    "knorm": Knorm,
    "tova": TOVA,
    "keydiff": KeyDiff,
    "expected_attention": ExpectedAttention,
    "rkv": RKV,
    "snapkv_decode": SnapKVDecode,
    "triattention": TriAttention,
    "random": RandomEvict,
    "h2o": H2O,
    "adakv": AdaKV,
    "pyramidkv": PyramidKV,
    "kivi": Kivi,
}



def knob_names() -> list[str]:
    """Every knob of every registered method, each once: the method-specific ones in registration order, then the
    knobs all methods share (``positions``). Result rows carry one column per name; a config key outside this list
    (and ``method``) is refused."""
    shared = [f.name for f in fields(CompressionMethod)]
    names = dict.fromkeys(f.name for cls in METHODS.values() for f in fields(cls) if f.name not in shared)
    return [*names, *shared]


__all__ = [
    "METHODS", "knob_names", "AdaKV", "CompressionMethod", "DecodeMethod", "ExpectedAttention", "H2O", "KeyDiff",
    "Kivi", "Knorm", "NoCompression", "PyramidKV", "RKV", "RandomEvict", "SnapKV", "SnapKVDecode", "SnapStream",
    "StreamingLLM", "TOVA", "TriAttention",
]
