"""The task interface (tasks/protocol.py) holds for every registered task; optional hooks have the documented
signatures; the shared data knobs (tasks/source.py) refuse bad values the same way for every task; backends
declare their capabilities."""

from __future__ import annotations

import inspect

import pytest

from evals.execute.backends import BACKENDS, backend_class
from tasks import TASKS, get_task
from tasks.protocol import OPTIONAL_HOOKS, Task, hook, score_all
from tasks.source import apply_limit, local_file

# the keyword-only parameters each optional hook must accept, as the runner calls it
HOOK_KWARGS = {"score_many": {"cfg"}, "answer_part": {"cfg"}, "followup": {"cfg", "tokenizer"},
               "followup_bound": {"cfg", "tokenizer"}}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_registered_task_satisfies_the_protocol(name):
    task = get_task(name)
    assert isinstance(task, Task)
    for fn in ("prompt", "score", "summarize"):
        assert "cfg" in inspect.signature(getattr(task, fn)).parameters, f"{name}.{fn} takes cfg="
    assert "tokenizer" in inspect.signature(task.prompt).parameters
    for hook_name, kwargs in HOOK_KWARGS.items():
        fn = hook(task, hook_name)
        if fn is not None:
            params = inspect.signature(fn).parameters
            assert kwargs <= set(params), f"{name}.{hook_name} lacks {kwargs - set(params)}"
    # a second call comes with its bound: the rows are sized once for the run (tasks.protocol.call_extent)
    assert (hook(task, "followup") is None) == (hook(task, "followup_bound") is None), name
    metric = hook(task, "PRIMARY_METRIC")
    assert metric is None or isinstance(metric, str)


def test_hook_refuses_undocumented_names():
    """The runner reaches optional hooks only through ``hook``, which knows only the documented ones."""
    with pytest.raises(KeyError, match="not a task hook"):
        hook(get_task("needle"), "folowup")
    assert {"validate", "score_many", "answer_part", "followup", "protocol_name", "per_problem",
            "PRIMARY_METRIC"} <= set(OPTIONAL_HOOKS)


class _OneByOne:
    @staticmethod
    def score(item, text, *, cfg=None):
        return {"prediction": text, "answer": item, "correct": text == item}


class _Many(_OneByOne):
    @staticmethod
    def score_many(pairs, *, cfg=None):
        return [{"prediction": "many", "answer": i, "correct": False} for i, _ in pairs]


def test_score_all_prefers_score_many():
    pairs = [("a", "a"), ("b", "c")]
    assert [r["correct"] for r in score_all(_OneByOne, pairs, None)] == [True, False]
    assert [r["prediction"] for r in score_all(_Many, pairs, None)] == ["many", "many"]


@pytest.mark.parametrize(("cfg", "field"), [
    ({"source": "web"}, "task.source"),
    ({"source": "path"}, "task.path: required"),
    ({"source": "path", "path": "x.csv"}, "task.path: expected a .jsonl, .json or .parquet file"),
    ({"source": "path", "path": "/nonexistent/x.jsonl"}, "task.path: no such file"),
])
def test_local_file_names_the_field(cfg, field):
    with pytest.raises(ValueError, match=field):
        local_file(cfg, "aime24/sample.jsonl")


def test_local_file_and_limit():
    assert local_file({"source": "bundled"}, "aime24/sample.jsonl").name == "sample.jsonl"
    assert local_file({"source": "hub"}, "aime24/sample.jsonl") is None
    assert apply_limit([1, 2, 3], {"limit": 2}) == [1, 2]
    assert apply_limit([1, 2, 3], {"limit": None}) == [1, 2, 3]
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="task.limit"):
            apply_limit([1], {"limit": bad})


@pytest.mark.parametrize("name", ["aime24", "longbench_v2", "livecodebench"])
def test_every_file_task_refuses_a_missing_path_the_same_way(name, tmp_path):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"name": name, "source": "path", "path": str(tmp_path / "nope.jsonl"), "limit": None})
    with pytest.raises(ValueError, match="task.path: no such file"):
        get_task(name).load(cfg)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_backends_declare_their_capabilities(name):
    cls = backend_class(name)
    for attr, kind in (("loads_weights", bool), ("replays", bool), ("engine", bool), ("needs_prompts", bool),
                       ("supports_followup", bool)):
        assert isinstance(getattr(cls, attr), kind), f"{name}.{attr}"
    assert cls.batch_size is None or (isinstance(cls.batch_size, int) and cls.batch_size >= 1)
    assert cls.replays != cls.loads_weights  # a backend generates (hf, vllm) or replays
    assert not (cls.engine and not cls.loads_weights)  # our engine runs weights


def test_unknown_backend_is_refused_with_the_field():
    with pytest.raises(ValueError, match="backend.name: must be one of hf, replay, vllm, got 'hff'. Did you mean 'hf'"):
        backend_class("hff")
