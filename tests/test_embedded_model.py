"""The converted embedded SmolLM2 (``$SNAPSTREAM_CACHE/smollm2-135m-instruct``) is identified by its content and
trusted only when private: an edited chat template changes the identity of ``smollm2_135m`` and of ``tiny_llama``
(which uses its tokenizer) and the run's fingerprint; a folder writable by others, another user's, or a link is
refused in one line; the leftover of a conversion killed midway is removed, a live one is left alone.

Each test works on a private copy of the converted folder in a temporary ``$SNAPSTREAM_CACHE`` (small files copied,
the weight file hard-linked to one copy per module and never written)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evals.config.embedded import CONVERT_PREFIX, EMBEDDED_DIR, _host, embedded_dir, remove_stale_conversions
from evals.config.models import load_tokenizer, weights_identity
from tests.runner_utils import ROOT, compose_cfg
from tests.runner_utils import plan_cfg as plan
from tests.small_runs import NEEDLE

EXTRA = "<|im_start|>system\nAnswer in one word.<|im_end|>\n"


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """One copy of the machine's converted weights per module (never written; each test hard-links it, so that the
    machine's own file, and its remembered hash, are never touched)."""
    real = embedded_dir() / "model.safetensors"  # converted once if missing; only read
    copy = tmp_path_factory.mktemp("weights") / "model.safetensors"
    shutil.copy2(real, copy)
    return copy


@pytest.fixture
def cache(tmp_path, monkeypatch, weights) -> Path:
    """A ``$SNAPSTREAM_CACHE`` holding a private copy of the converted folder."""
    root = tmp_path / "cache"
    copy = root / EMBEDDED_DIR
    copy.mkdir(parents=True, mode=0o700)
    for f in embedded_dir().iterdir():
        if f.name != "model.safetensors":
            shutil.copy2(f, copy / f.name)
    try:
        os.link(weights, copy / "model.safetensors")
    except OSError:  # another file system
        shutil.copy2(weights, copy / "model.safetensors")
    monkeypatch.setenv("SNAPSTREAM_CACHE", str(root))
    return root


def prompt_tokens(model_cfg) -> int:
    tokenizer = load_tokenizer(model_cfg)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_editing_the_converted_chat_template_changes_the_identities_and_the_fingerprint(cache):
    embedded, tiny = compose_cfg(["model=smollm2_135m"]).model, compose_cfg(["model=tiny_llama"]).model
    before = weights_identity(embedded), weights_identity(tiny), plan(compose_cfg(NEEDLE)).fingerprint
    tokens = prompt_tokens(embedded)
    template = cache / EMBEDDED_DIR / "chat_template.jinja"
    template.write_text(EXTRA + template.read_text(encoding="utf-8"), encoding="utf-8")
    assert prompt_tokens(embedded) > tokens  # the tokenizer reads the copy: every prompt grows
    after = weights_identity(embedded), weights_identity(tiny), plan(compose_cfg(NEEDLE)).fingerprint
    assert all(a != b for a, b in zip(before, after)), (before, after)


def test_the_content_not_the_folder_is_the_identity(cache, monkeypatch):
    embedded = compose_cfg(["model=smollm2_135m"]).model
    copied = weights_identity(embedded)
    monkeypatch.delenv("SNAPSTREAM_CACHE")
    assert weights_identity(embedded) == copied


def _refused(match: str) -> None:
    with pytest.raises(ValueError, match=rf"^model.source: the converted embedded SmolLM2 .*{match}") as exc:
        plan(compose_cfg([*NEEDLE[1:], "model=smollm2_135m"]))
    assert "\n" not in str(exc.value)


def test_a_converted_folder_writable_by_others_is_refused_in_one_line(cache):
    folder = cache / EMBEDDED_DIR
    os.chmod(folder, 0o777)
    _refused(r"writable by others \(mode 777\)")
    os.chmod(folder, 0o700)
    os.chmod(folder / "chat_template.jinja", 0o666)
    _refused(r"chat_template.jinja is writable by others")
    assert not list(cache.glob(CONVERT_PREFIX + "*"))  # refused, not converted over


def test_a_converted_folder_that_is_a_link_or_holds_one_is_refused(cache, tmp_path):
    folder = cache / EMBEDDED_DIR
    template = folder / "chat_template.jinja"
    elsewhere = tmp_path / "template.jinja"
    shutil.move(template, elsewhere)
    template.symlink_to(elsewhere)
    _refused("chat_template.jinja is a symbolic link")
    template.unlink()
    shutil.move(elsewhere, template)
    moved = tmp_path / "moved"
    folder.rename(moved)
    folder.symlink_to(moved)
    _refused("is a symbolic link")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another uid needs root")
def test_a_converted_folder_of_another_user_is_refused(cache):
    os.chown(cache / EMBEDDED_DIR, 4242, -1)
    _refused("is owned by uid 4242")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_stale_conversion_folder_of_a_dead_process_is_removed_a_live_one_kept(cache, caplog):
    dead, live = _dead_pid(), os.getpid()
    names = {"dead": f"{CONVERT_PREFIX}{_host()}-{dead}-abc", "live": f"{CONVERT_PREFIX}{_host()}-{live}-def",
             "other_host": f"{CONVERT_PREFIX}not_{_host()}-{dead}-ghi",
             "old_legacy": f"{CONVERT_PREFIX}k3j_9x2a", "new_legacy": f"{CONVERT_PREFIX}p0q1r2s3"}
    for name in names.values():
        (cache / name).mkdir()
        (cache / name / "model.safetensors").write_bytes(b"half")
    two_hours_ago = time.time() - 7200
    os.utime(cache / names["old_legacy"], (two_hours_ago, two_hours_ago))  # an earlier harness's, left long ago
    with caplog.at_level(logging.WARNING, logger="evals.config.embedded"):
        assert embedded_dir() == cache / EMBEDDED_DIR
    gone = {label for label, name in names.items() if not (cache / name).exists()}
    assert gone == {"dead", "old_legacy"}
    lines = [r.getMessage() for r in caplog.records if r.name == "evals.config.embedded"]
    assert len(lines) == 2 and all("interrupted model conversion" in line for line in lines)
    assert any(names["dead"] in line and f"process {dead} is gone" in line for line in lines)
    assert any(names["old_legacy"] in line and "earlier harness" in line for line in lines)


@pytest.mark.slow
def test_a_conversion_killed_midway_leaves_a_folder_the_next_call_removes(tmp_path):
    """A real conversion, killed with SIGKILL once its temporary folder exists: the target never appears, and the
    next call removes the temporary (about 10 s of CPU to reach the save)."""
    env = {**os.environ, "SNAPSTREAM_CACHE": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", "from evals.config.embedded import embedded_dir; embedded_dir()"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not list(tmp_path.glob(CONVERT_PREFIX + "*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    left = list(tmp_path.glob(CONVERT_PREFIX + "*"))
    assert left and not (tmp_path / EMBEDDED_DIR).exists()
    assert remove_stale_conversions(tmp_path) == left and not list(tmp_path.glob(CONVERT_PREFIX + "*"))
