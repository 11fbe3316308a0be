"""A local checkpoint (``model.source=path``) is identified by its whole content (evals/config/checkpoint_hash.py):
weights changed past the first MiB, a new chat template, tokenizer or generation config give another identity; each file
is hashed once (remembered by path, size, mtime and inode), and a changed file is hashed again."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import evals.config.checkpoint_hash as checkpoint_hash
import evals.config.models as models
from evals.config.checkpoint_hash import MEMO, checkpoint_sha256


def checkpoint(root: Path) -> Path:
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    (root / "model.safetensors").write_bytes(b"\0" * (3 << 20))
    (root / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    (root / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    (root / "generation_config.json").write_text(json.dumps({"temperature": 0.6}))
    (root / "README.md").write_text("about this model")
    return root


@pytest.fixture
def reads(monkeypatch):
    """The files whose content was read to be hashed."""
    seen: list[str] = []
    stream = checkpoint_hash.stream_sha256

    def counting(path):
        seen.append(Path(path).name)
        return stream(path)

    monkeypatch.setattr(checkpoint_hash, "stream_sha256", counting)
    return seen


@pytest.mark.parametrize("change", ["weights_past_first_mib", "chat_template_file", "chat_template_in_config",
                                    "tokenizer", "generation_config", "vocab_file"])
def test_two_checkpoints_differing_anywhere_that_decides_tokens_get_two_identities(tmp_path, change):
    a = checkpoint(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    if change == "weights_past_first_mib":
        with open(b / "model.safetensors", "r+b") as fh:
            fh.seek(2 << 20)
            fh.write(b"\1")
    elif change == "chat_template_file":
        (b / "chat_template.jinja").write_text("{{ other }}")
    elif change == "chat_template_in_config":
        (b / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ other }}"}))
    elif change == "tokenizer":
        (b / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"b": 0}}}))
    elif change == "generation_config":
        (b / "generation_config.json").write_text(json.dumps({"temperature": 0.7}))
    else:
        (b / "vocab.json").write_text("{}")
    assert checkpoint_sha256(a, tmp_path / "memo") != checkpoint_sha256(b, tmp_path / "memo")


def test_a_readme_is_not_part_of_the_identity(tmp_path):
    a = checkpoint(tmp_path / "a")
    before = checkpoint_sha256(a, tmp_path / "memo")
    (a / "README.md").write_text("edited")
    assert checkpoint_sha256(a, tmp_path / "memo") == before


def test_each_file_is_hashed_once_and_again_when_it_changes(tmp_path, reads):
    a = checkpoint(tmp_path / "a")
    first = checkpoint_sha256(a, tmp_path / "memo")
    assert sorted(reads) == sorted(["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                                    "generation_config.json"])
    reads.clear()
    assert checkpoint_sha256(a, tmp_path / "memo") == first and reads == []  # a second run reads no file
    st = os.stat(a / "model.safetensors")
    with open(a / "model.safetensors", "r+b") as fh:  # same size, same mtime: the inode's ctime still moves
        fh.seek(2 << 20)
        fh.write(b"\2")
    os.utime(a / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert checkpoint_sha256(a, tmp_path / "memo") != first and reads == ["model.safetensors"]


def test_an_untrusted_or_damaged_memo_is_not_used(tmp_path, reads, caplog):
    a = checkpoint(tmp_path / "a")
    first = checkpoint_sha256(a, tmp_path / "memo")
    memo = tmp_path / "memo" / MEMO
    forged = {k: {**v, "sha256": "0" * 64} for k, v in json.loads(memo.read_text()).items()}
    memo.write_text(json.dumps(forged))
    os.chmod(memo, 0o666)  # anyone could have written these hashes
    reads.clear()
    assert checkpoint_sha256(a, tmp_path / "memo") == first and len(reads) == 5
    assert any("writable by others" in r.getMessage() for r in caplog.records)
    memo.unlink()
    memo.write_text("[" * 100000)
    os.chmod(memo, 0o600)
    assert checkpoint_sha256(a, tmp_path / "memo") == first


def test_weights_identity_of_a_path_model_is_its_content(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "cache_root", lambda: tmp_path / "cache")
    a = checkpoint(tmp_path / "a")
    cfg = OmegaConf.create({"source": "path", "path": str(a)})
    before = models.weights_identity(cfg)
    (a / "chat_template.jinja").write_text("{{ new }}")
    after = models.weights_identity(cfg)
    assert before.startswith("path:") and after.startswith("path:") and before != after
    assert (tmp_path / "cache" / MEMO).is_file()
