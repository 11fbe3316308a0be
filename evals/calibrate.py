"""``python -m evals.calibrate model=NAME [text=FILE] [max_tokens=N] [out=PATH]``: write TriAttention's calibration
file for a model (``compression=triattention compression.calibration=PATH``), from plain text in one forward pass.

``text`` defaults to the bundled Paul Graham essays (``tasks/data/needle``); the reference recommends natural text of
up to 32,768 tokens (``docs/calibration.md`` of WeianMao/triattention): ``max_tokens`` defaults to that or the model's
positions, whichever is fewer. ``out`` defaults to
``<SNAPSTREAM_CACHE or ~/.cache/snapstream>/calibration/<model>.safetensors``.

``python -m evals.calibrate model=NAME from_reference=FILE.pt [out=PATH]`` converts one of the reference's own
calibration files (``triattention/calibration/for_aime24_experiment/ds_llama8b.pt``, every head sampled) for the
model's shape, without loading weights. The pickle is read with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import time
from pathlib import Path
from typing import Any

USAGE = __doc__
KEYS = ("model", "text", "max_tokens", "out", "from_reference")
DEFAULT_TOKENS = 32768  # scripts/calibrate.py --max-length; never more than the model's positions
log = logging.getLogger(__name__)


def parse(argv: list[str]) -> dict[str, str]:
    """``key=value`` arguments; an unknown key or a missing ``model`` is refused in one line."""
    args = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or key not in KEYS:
            raise ValueError(f"{arg}: expected key=value with key one of {', '.join(KEYS)}")
        args[key] = value
    if "model" not in args:
        raise ValueError("model: required (model=NAME, one of conf/model/*.yaml)")
    if "text" in args and "from_reference" in args:
        raise ValueError("from_reference: give text= (calibrate) or from_reference= (convert), not both")
    if not str(args.get("max_tokens", "1")).isdigit() or int(args.get("max_tokens", 1)) < 1:
        raise ValueError(f"max_tokens: must be an integer >= 1, got {args['max_tokens']!r}")
    return args


def model_config(name: str) -> Any:
    """The resolved ``model`` node of ``conf/model/<name>.yaml``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from evals.config.conf_store import CONF, register_methods

    if not (CONF / "model" / f"{name}.yaml").is_file():
        known = ", ".join(sorted(p.stem for p in (CONF / "model").glob("*.yaml")))
        raise ValueError(f"model: unknown model {name!r}; known: {known}")
    register_methods()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=[f"model={name}"]).model


def default_out(name: str) -> Path:
    from evals.config.models import cache_root

    return cache_root() / "calibration" / f"{name}.safetensors"


def from_text(model_cfg: Any, text: str, max_tokens: int, out: Path) -> Path:
    """Load the model, run the text (at most ``max_tokens`` tokens, no special tokens added beyond the tokenizer's
    own, as ``scripts/calibrate.py``), write the statistics."""
    import torch
    from tqdm.auto import tqdm

    from evals.config.models import load_model
    from snapstream_core.calibration import query_statistics, save_stats

    start = time.perf_counter()
    model, tokenizer = load_model(model_cfg)
    ids = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_tokens).input_ids
    device = next(model.parameters()).device
    layers = model.config.num_hidden_layers
    log.info("calibrate: weights loaded and %d tokens read in %.0f s; one forward pass over them on %s, layer by "
             "layer (%d layers)", ids.shape[1], time.perf_counter() - start, device, layers)
    with tqdm(total=layers, desc="calibrate: layers read", unit="layer", dynamic_ncols=True) as bar:
        q_mean, q_abs_mean = query_statistics(model, ids.to(device), on_layer=lambda done, _: bar.update(done - bar.n))
    log.info("calibrate: forward pass done in %.0f s", time.perf_counter() - start)
    rope = model.config.rope_parameters
    return save_stats(out, q_mean, q_abs_mean, n_kv_heads=model.config.num_key_value_heads,
                      rope_theta=float(rope["rope_theta"]), rope_type=str(rope.get("rope_type", "default")),
                      extra={"model": model_cfg.name, "tokens": str(ids.shape[1]), "dtype": str(model.dtype),
                             "text_sha256": hashlib.sha256(text.encode()).hexdigest(), "torch": torch.__version__})


def from_reference(model_cfg: Any, path: Path, out: Path) -> Path:
    """Convert the reference's ``{"metadata": {..., "sampled_heads"}, "stats": {"layerLL_headHH": {q_mean_real,
    q_mean_imag, q_abs_mean}}}`` (``pruning_utils.save_head_frequency_stats``) for the model's shape block; every
    (layer, head) must be there (the per-head protocol scores them all)."""
    import torch

    from snapstream_core.calibration import save_stats

    shape = dict(model_cfg.shape)
    if "rope_theta" not in shape:
        raise ValueError(f"model.shape.rope_theta: {model_cfg.name} states no rope_theta to convert for")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
        meta, stats = payload["metadata"], payload["stats"]
    except Exception as exc:  # a pickle we do not read, or not the reference's layout
        raise ValueError(f"from_reference: {path} is not a TriAttention stats file ({type(exc).__name__})") from None
    named, ours = meta.get("model_name"), model_cfg.get("hub_id")
    if named and ours and str(named) != str(ours):
        raise ValueError(f"from_reference: {path} was made for {named}, not {model_cfg.name} ({ours})")
    L, H, D = shape["n_layers"], shape["n_heads"], shape["head_dim"]
    if int(meta.get("head_dim", D)) != D or meta.get("rope_style", "half") != "half":
        raise ValueError(f"from_reference: {path} has head_dim {meta.get('head_dim')}, rope_style "
                         f"{meta.get('rope_style')}; {model_cfg.name} has {D}, half")
    missing = [f"layer{layer:02d}_head{head:02d}" for layer in range(L) for head in range(H)
               if f"layer{layer:02d}_head{head:02d}" not in stats]
    if missing:
        raise ValueError(f"from_reference: {path} lacks {len(missing)} of {L * H} heads of {model_cfg.name} "
                         f"(first {missing[0]})")

    def stack(name: str) -> torch.Tensor:
        return torch.stack([torch.stack([stats[f"layer{layer:02d}_head{head:02d}"][name].float()
                                         for head in range(H)]) for layer in range(L)])

    q_mean = torch.complex(stack("q_mean_real"), stack("q_mean_imag"))
    return save_stats(out, q_mean, stack("q_abs_mean"), n_kv_heads=shape["n_kv_heads"],
                      rope_theta=float(shape["rope_theta"]), rope_type=str(shape.get("rope_type", "default")),
                      extra={"model": model_cfg.name, "converted_from": path.name, "source_model": str(named),
                             "source_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                             "source_rope_type": str(meta.get("rope_type"))})


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        args = parse(argv)
        model_cfg = model_config(args["model"])
        out = Path(args.get("out") or default_out(args["model"])).expanduser()
        if "from_reference" in args:
            source = Path(args["from_reference"]).expanduser()
            if not source.is_file():
                raise ValueError(f"from_reference: no such file: {source}")
            path = from_reference(model_cfg, source, out)
        else:
            if "text" in args:
                text_path = Path(args["text"]).expanduser()
                if not text_path.is_file():
                    raise ValueError(f"text: no such file: {text_path}")
                text = text_path.read_text(encoding="utf-8", errors="replace")
            else:
                from tasks.needle import haystack_text

                text = haystack_text()
            longest = int((model_cfg.get("shape") or {}).get("max_positions") or DEFAULT_TOKENS)
            path = from_text(model_cfg, text, int(args.get("max_tokens", min(DEFAULT_TOKENS, longest))), out)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
