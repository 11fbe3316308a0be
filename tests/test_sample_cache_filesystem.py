"""The sample cache on a shared filesystem (docs/sample_cache.md, "Shared filesystems"): a cache folder on a network
filesystem (NFS, Lustre, ...) is replaced by a node-local one, since SQLite's write-ahead log is unsafe there; on a
local filesystem nothing changes. The mount table is a parameter, so a test gives a fake one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evals.config.spec import check
from evals.execute.cache_place import place
from evals.execute.loop import run
from evals.execute.sample_cache import DBNAME, DIRNAME
from evals.record.filesystem import filesystem_of, is_network, mount_of, parse_mountinfo
from tests.runner_utils import TINY, compose_cfg

ROOT_LINE = "22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw"


def table(*mounts: tuple[str, str]) -> str:
    """A mountinfo text: ``/`` on ext4, then each (mount point, filesystem type)."""
    lines = [ROOT_LINE]
    for i, (point, fstype) in enumerate(mounts):
        escaped = point.replace(" ", "\\040")
        lines.append(f"{40 + i} 22 0:{50 + i} / {escaped} rw,relatime shared:{2 + i} - {fstype} server:/export rw")
    return "\n".join(lines) + "\n"


def test_the_mount_of_a_path_is_the_longest_mount_point_above_it():
    mounts = parse_mountinfo(table(("/mnt/a", "nfs4"), ("/mnt/a b", "lustre"), ("/mnt/a/x", "xfs")))
    assert mount_of("/mnt/a/results", mounts).fstype == "nfs4"
    assert mount_of("/mnt/ab", mounts).fstype == "ext4"  # a prefix of the name is not a folder above it
    assert mount_of("/mnt/a b/c", mounts).fstype == "lustre"  # \040 in the table is a space
    assert mount_of("/mnt/a/x/y", mounts).fstype == "xfs"
    stacked = parse_mountinfo(table(("/data", "ext4"), ("/data", "nfs")))
    assert mount_of("/data/r", stacked).fstype == "nfs"  # the later mount hides the earlier one
    assert parse_mountinfo("garbage\n\n") == []


def test_network_filesystems_are_told_from_local_ones():
    for fstype in ("nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "ceph", "fuse.glusterfs", "beegfs", "fuse.sshfs",
                   "9p", "fuse.s3fs", "wekafs"):
        assert is_network(fstype), fstype
    for fstype in ("ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "fuseblk", "fuse.fuse-overlayfs", "nfsd"):
        assert not is_network(fstype), fstype


def test_a_folder_that_does_not_exist_yet_is_placed_through_its_links(tmp_path):
    (tmp_path / "nfs").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "nfs")
    info = table((str((tmp_path / "nfs").resolve()), "nfs4"))
    assert filesystem_of(tmp_path / "link" / "results" / DIRNAME, info).fstype == "nfs4"


def test_a_cache_on_nfs_moves_to_a_node_local_folder_named_by_host(tmp_path, caplog):
    shared, local = tmp_path / "shared", tmp_path / "local"
    shared.mkdir(), local.mkdir()
    info = table((str(shared.resolve()), "nfs4"))
    where = place(shared / DIRNAME, info, [local, Path("/tmp")], host="node 7")
    assert where.used == local / f"snapstream-sample-cache-{os.geteuid()}-node_7"
    assert where.filesystem == "nfs4" and "network filesystem" in where.why
    assert [r.getMessage() for r in caplog.records if "sample cache" in r.getMessage()] == [
        f"sample cache: {shared / DIRNAME} is on nfs4, a network filesystem, where SQLite's write-ahead log is "
        f"unsafe: this run uses the node-local cache {where.used} instead (samples are reused by jobs of this host; "
        "$SNAPSTREAM_SAMPLE_CACHE names a local folder, sample_cache=false turns it off)"]
    # $TMPDIR itself on the network: the next local folder
    assert place(shared / DIRNAME, info, [shared / "tmp", local], host="n").used.parent == local
    # nowhere local: the cache is off for the run, never opened on NFS
    off = place(shared / DIRNAME, table(("/", "lustre")), [Path("/tmp")], host="n")
    assert off.used is None and off.why.endswith("no local folder, cache off")


def test_a_cache_on_a_local_filesystem_stays_where_it_was_asked(tmp_path):
    where = place(tmp_path / DIRNAME, table(("/mnt/other", "nfs")), [Path("/tmp")], host="n")
    assert where.used == tmp_path / DIRNAME and where.why is None and where.filesystem == "ext4"


@pytest.fixture
def cache_on(monkeypatch):
    monkeypatch.delenv("SNAPSTREAM_SAMPLE_CACHE", raising=False)  # the suite turns the cache off (conftest.py)


def tiny_run(out_root: Path, mountinfo: Path, *overrides: str) -> Path:
    cfg = compose_cfg([*TINY, "task=needle", "task.context_tokens=128", "task.n_items=2", "gen.max_new_tokens=2",
                       f"out_root={out_root}", *overrides])
    return run(check(cfg), mountinfo=mountinfo)


def test_a_run_whose_results_are_on_nfs_keeps_its_cache_node_local_and_says_so_in_meta(tmp_path, monkeypatch,
                                                                                        cache_on):
    results, local = tmp_path / "results", tmp_path / "local"
    results.mkdir(), local.mkdir()
    monkeypatch.setenv("TMPDIR", str(local))
    nfs = tmp_path / "mountinfo"
    nfs.write_text(table((str(results.resolve()), "nfs4")))
    first = tiny_run(results, nfs, "task.limit=1")
    meta = json.loads((first / "meta.json").read_text())
    used = local / f"snapstream-sample-cache-{os.geteuid()}-{meta['sample_cache_place']['used'].rsplit('-', 1)[1]}"
    assert meta["sample_cache"] == str(used) and (used / DBNAME).is_file()
    assert meta["sample_cache_place"] == {"asked": str(results.resolve() / DIRNAME), "filesystem": "nfs4",
                                          "used": str(used), "why": meta["sample_cache_place"]["why"]}
    assert not (results / DIRNAME).exists()  # no database was opened on the network filesystem
    second = tiny_run(results, nfs, "task.limit=2")  # the node-local cache is reused
    assert json.loads((second / "meta.json").read_text())["cached_rows"] == 1
    # the same results folder on ext4: the cache is where it was asked, as before
    ext4 = tmp_path / "mountinfo-ext4"
    ext4.write_text(table())
    third = tiny_run(results, ext4, "gen.seed=7", "task.limit=1")  # a new run: generated, stored
    meta = json.loads((third / "meta.json").read_text())
    assert meta["sample_cache"] == str(results.resolve() / DIRNAME) and (results / DIRNAME / DBNAME).is_file()
    assert meta["sample_cache_place"]["used"] == meta["sample_cache"] and meta["sample_cache_place"]["why"] is None
