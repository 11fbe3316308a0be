"""Where the problems come from: the hub release files, a local file, or the bundled sample; then the date window.

Hub: ``livecodebench/code_generation_lite`` is a loading script that ``datasets>=4`` refuses, so its JSONL files
are fetched with ``huggingface_hub.hf_hub_download`` and read directly. Releases, as the dataset's own script maps
them: ``release_vN`` = the files of versions 1..N, ``release_latest`` = all six, ``vN`` = the file of version N
alone, ``vX_vY`` = the files of versions X..Y (e.g. ``v4_v5``).
Date window (``lcb_runner``'s ``load_code_generation_dataset``): keep ``start_date <= contest_date <= end_date``,
both bounds at midnight.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from tasks.base import iter_jsonl, read_records
from tasks.livecodebench.problem import Problem, parse_problem
from tasks.source import cfg_get, check_limit, local_file

log = logging.getLogger(__name__)

HUB_ID = "livecodebench/code_generation_lite"
VERSION_FILES = {1: "test.jsonl", 2: "test2.jsonl", 3: "test3.jsonl", 4: "test4.jsonl", 5: "test5.jsonl",
                 6: "test6.jsonl"}
BUNDLED = "livecodebench/sample.jsonl"


def release_files(release: str) -> list[str]:
    """The hub files of a release name (see the module docstring)."""
    last = max(VERSION_FILES)
    if release == "release_latest":
        versions = range(1, last + 1)
    elif m := re.fullmatch(r"release_v(\d+)", release):
        versions = range(1, int(m.group(1)) + 1)
    elif m := re.fullmatch(r"v(\d+)", release):
        versions = range(int(m.group(1)), int(m.group(1)) + 1)
    elif m := re.fullmatch(r"v(\d+)_v(\d+)", release):
        versions = range(int(m.group(1)), int(m.group(2)) + 1)
    else:
        versions = range(0)
    if not versions or versions[0] < 1 or versions[-1] > last:
        known = ", ".join([f"release_v1..release_v{last}", "release_latest", f"v1..v{last}", "vX_vY (X<Y)"])
        raise ValueError(f"task.release: unknown release {release!r}; known: {known}")
    return [VERSION_FILES[v] for v in versions]


def parse_date(value: Any, name: str) -> datetime | None:
    if value is None or value == "":
        return None
    try:
        return datetime.strptime(str(value), "%Y-%m-%d")
    except ValueError as exc:
        raise ValueError(f"task.{name}: expected YYYY-MM-DD, got {value!r}") from exc


def window(cfg: Any) -> tuple[datetime | None, datetime | None]:
    start, end = parse_date(cfg_get(cfg, "start_date"), "start_date"), parse_date(cfg_get(cfg, "end_date"), "end_date")
    if start and end and start > end:
        raise ValueError(f"task.start_date: {start.date()} is after task.end_date {end.date()}")
    return start, end


def source_paths(cfg: Any) -> list[str]:
    """The local files to read for ``task.source`` (downloading them for ``hub``)."""
    path = local_file(cfg, BUNDLED)
    if path is not None:
        return [str(path)]
    files = release_files(cfg_get(cfg, "release", "release_latest"))
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise ValueError("task.source=hub needs the huggingface_hub package") from exc
    from tasks.hub import offline_reason, unreachable_data

    repo, revision = cfg_get(cfg, "hub_id", HUB_ID), cfg_get(cfg, "revision")
    reason = offline_reason()  # one probe: with no hub, the cached files or one line, never a retry loop
    paths = []
    for name in files:
        try:
            paths.append(hf_hub_download(repo_id=repo, filename=name, repo_type="dataset", revision=revision,
                                         local_files_only=reason is not None))
        except Exception as exc:  # noqa: BLE001 - network, auth and missing-file errors all end here
            if reason is not None:
                raise ValueError(unreachable_data(f"{repo}/{name}", reason)) from None
            raise ValueError(f"task.source=hub: cannot fetch {repo}/{name} (revision {revision or 'main'}): "
                             f"{exc}. Offline, download the files and use task.source=path.") from exc
    return paths


def _rows(path: str) -> Iterator[tuple[dict, str]]:
    """(record, where) pairs; JSONL is streamed so that a large release file is never held whole."""
    if not path.endswith(".jsonl"):
        for k, record in enumerate(read_records(path)):
            yield record, f"{path} record {k}"
        return
    for lineno, record in iter_jsonl(path):
        yield record, f"{path} line {lineno}"


def _in_window(record: dict, where: str, start: datetime | None, end: datetime | None) -> bool:
    if start is None and end is None:
        return True
    raw = record.get("contest_date")
    try:
        date = raw if isinstance(raw, datetime) else datetime.fromisoformat(str(raw))
    except ValueError as exc:
        raise ValueError(f"{where}: field 'contest_date' is not an ISO date: {raw!r}") from exc
    date = date.replace(tzinfo=None)
    return (start is None or start <= date) and (end is None or date <= end)


def load_problems(cfg: Any) -> list[Problem]:
    """Every problem of the configured source inside the date window, in file order, the first ``limit`` of them."""
    start, end = window(cfg)
    limit = check_limit(cfg)
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for path in source_paths(cfg):
        for record, where in _rows(path):
            if not _in_window(record, where, start, end):
                continue
            problem = parse_problem(record, where, source_file=path)
            if problem.question_id in seen:
                raise ValueError(f"{where}: duplicate question_id {problem.question_id!r} "
                                 f"(first at {seen[problem.question_id]})")
            seen[problem.question_id] = where
            problems.append(problem)
            if limit is not None and len(problems) >= int(limit):
                return _named_broken(problems)
    if not problems:
        raise ValueError(f"task: no problem of task.source={cfg_get(cfg, 'source', 'hub')} lies in the window "
                         f"task.start_date={cfg_get(cfg, 'start_date')} .. task.end_date={cfg_get(cfg, 'end_date')}")
    log.info("LiveCodeBench: %d problems loaded", len(problems))
    return _named_broken(problems)


def _named_broken(problems: list[Problem]) -> list[Problem]:
    """``problems``, after one warning naming each whose tests could not be parsed (they stay items)."""
    broken = [p for p in problems if p.data_error]
    if broken:
        log.warning("LiveCodeBench: %d problem(s) whose tests cannot be parsed stay items, every sample graded "
                    "data_error: %s", len(broken), "; ".join(f"{p.question_id}: {p.data_error[:200]}" for p in broken))
    return problems
