"""``task=lm_eval task.name=<lm-eval task>``: any lm-evaluation-harness ``generate_until`` task in our runner.

Everything task-specific stays lm-eval's own: the documents (``eval_docs``, in lm-eval's order; ``item_id`` is
lm-eval's ``doc_id``), the context of each (``fewshot_context`` with the task's few-shot sampler, seeded as
``simple_evaluate`` seeds it, rendered for all documents in order so every document gets the examples lm-eval gives it),
the stop strings and generation settings (``generation_kwargs``, see :func:`harness.generation`), the scoring (the
task's filter ensembles, then its ``process_results``) and the aggregation (its ``aggregation()`` functions and
lm-eval's standard errors).

Row columns: one per ``<metric>,<filter>`` pair (lm-eval's result keys); ``correct`` is ``task.metric`` (default: the
first metric under the first filter), ``prediction`` the completion after that filter, ``answer`` the target;
``gen_kwargs`` records the generation settings applied. Log-likelihood tasks are refused: compression acts on
generation.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from numbers import Number
from typing import Any

from tasks.base import Prompt
from tasks.lazy import LazyModule
from tasks.lm_eval import harness
from tasks.source import check_limit

pd = LazyModule("pandas")  # imported at first use: the planner imports task modules, not pandas

log = logging.getLogger(__name__)

# Per lm-eval task: the first row of its summary (``task.metric``, else its first metric under its first filter).
PRIMARY_METRIC = None
REPORTS_STDERR = True  # summarize gives lm-eval's own <metric>_stderr rows; evals.analysis.summary does not bootstrap


@dataclass(frozen=True)
class LmEvalItem:
    """One lm-eval document. ``context``: lm-eval's rendered context, a string or (with ``apply_chat_template``) a
    tuple of chat messages; ``stop``/``gen``: the request's generation settings (:func:`harness.generation`)."""

    item_id: str
    doc_id: int
    doc: dict[str, Any]
    context: str | tuple[dict[str, str], ...]
    target: Any
    stop: tuple[str, ...]
    gen: tuple[tuple[str, Any], ...]

    @property
    def breakdown(self) -> dict[str, Any]:
        return {}


def validate(cfg) -> None:
    """Cheap checks from lm-eval's task index (no dataset, no model): name, kind, output type, knobs."""
    check_limit(cfg)
    nfs = cfg.get("num_fewshot")
    if nfs is not None and (not isinstance(nfs, int) or nfs < 0):
        raise ValueError(f"task.num_fewshot: must be an integer >= 0 or null, got {nfs!r}")
    if cfg.get("fewshot_as_multiturn") and not cfg.get("apply_chat_template"):
        raise ValueError("task.fewshot_as_multiturn: needs task.apply_chat_template=true (as in lm-eval)")
    harness.check_name(cfg)


def load(cfg) -> list[LmEvalItem]:
    """The task's documents (first ``task.limit``) with their contexts, rendered in lm-eval's order."""
    validate(cfg)
    task = harness.build(cfg)
    task.set_fewshot_seed(seed=cfg.get("fewshot_seed", 1234))
    stop, gen = harness.generation(task)
    if task.config.repeats and task.config.repeats > 1:
        log.warning("lm-eval task %s has repeats=%d: samples per document follow gen.n_samples here",
                    cfg.name, task.config.repeats)  # fmt: skip
    _check_metric(cfg, task)
    chat = bool(cfg.get("apply_chat_template"))
    multiturn = cfg.get("fewshot_as_multiturn")
    multiturn = chat if multiturn is None else bool(multiturn)  # lm-eval: on with the chat template by default
    items = []
    for doc_id, doc in task.doc_iterator(limit=cfg.get("limit")):
        context = task.fewshot_context(
            doc,
            num_fewshot=task.get_config("num_fewshot") or 0,
            system_instruction=cfg.get("system_instruction"),
            apply_chat_template=chat,
            fewshot_as_multiturn=multiturn,
            chat_template=_as_messages if chat else None,
            gen_prefix=task.doc_to_prefix(doc),
        )
        if not isinstance(context, str) and not (context and isinstance(context[0], dict)):
            raise ValueError(f"task.name: lm-eval task {cfg.name!r} has multiple-input documents (not generation)")
        items.append(
            LmEvalItem(
                item_id=str(doc_id),
                doc_id=doc_id,
                doc=dict(doc),
                context=context if isinstance(context, str) else tuple(context),
                target=_gold(task, doc),
                stop=stop,
                gen=tuple(sorted(gen.items())),
            )
        )
    return items


def filter_names(task) -> list[str]:
    """The task's filter ensembles (lm-eval's ``none`` when it defines none)."""
    return [f["name"] for f in task.config.filter_list] if task.config.filter_list else ["none"]


def _check_metric(cfg, task) -> None:
    key = cfg.get("metric")
    if key is None:
        return
    known = [f"{m},{f}" for f in filter_names(task) for m in task.aggregation()]
    if key not in known:
        raise ValueError(f"task.metric: {key!r} is not one of this task's results: {', '.join(known)}")


def _as_messages(chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> list[dict[str, str]]:
    """Stands in for the model's ``apply_chat_template`` in ``fewshot_context``: keeps the messages, so that the
    backend renders them with the model's own template (a final assistant message is lm-eval's ``gen_prefix``)."""
    return [dict(m) for m in chat_history]


def _gold(task, doc) -> Any:
    gold = task.doc_to_target(doc)
    if task.config.doc_to_choice is not None and isinstance(gold, int):
        gold = task.doc_to_choice(doc)[gold]
    return gold


def prompt(item: LmEvalItem, model_cfg=None, *, cfg=None, tokenizer=None) -> Prompt:
    gen = dict(item.gen)
    if isinstance(item.context, str):
        return Prompt(item.context, stop=item.stop, gen=gen)
    messages = [dict(m) for m in item.context]
    prefill = messages.pop()["content"] if messages[-1]["role"] == "assistant" else None
    return Prompt(messages, prefill=prefill, stop=item.stop, gen=gen)


def score(item: LmEvalItem, completion: str, *, cfg=None) -> dict[str, Any]:
    return score_many([(item, completion)], cfg=cfg)[0]


def score_many(pairs: list[tuple[LmEvalItem, str]], *, cfg) -> list[dict[str, Any]]:
    """Each completion through the task's filter ensembles, then its ``process_results`` per filter."""
    from lm_eval.api.instance import Instance

    task = harness.build(cfg)
    instances = []
    for item, completion in pairs:
        inst = Instance(
            request_type=harness.GENERATE,
            doc=item.doc,
            arguments=(item.context, {}),
            idx=0,
            metadata=(task.config.task, item.doc_id, 1),
        )
        inst.resps = [completion or ""]
        instances.append(inst)
    task._instances = instances  # lm-eval's filters work on the task's instances (as in its evaluator)
    task.apply_filters()
    primary = cfg.get("metric")
    out = []
    for (item, _), inst in zip(pairs, instances):
        row: dict[str, Any] = {}
        for filter_name, resp in inst.filtered_resps.items():
            for metric, value in task.process_results(item.doc, [resp]).items():
                row[f"{metric},{filter_name}"] = _jsonable(value)
        key = primary if primary in row else next(iter(row))
        prediction = inst.filtered_resps[key.split(",", 1)[1]]
        value = row[key]
        out.append(
            {
                "prediction": prediction if isinstance(prediction, str) else json.dumps(_jsonable(prediction)),
                "answer": item.target if isinstance(item.target, str) else json.dumps(_jsonable(item.target)),
                "correct": float(value) if isinstance(value, Number) else None,
                **row,
                "gen_kwargs": json.dumps({**dict(item.gen), "stop": list(item.stop)}),
            }
        )
    return out


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item") and not isinstance(value, (list, tuple, dict)):
        return value.item()  # numpy scalars
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def metric_columns(cfg, columns) -> list[str]:
    """The ``<metric>,<filter>`` columns of the rows, ``task.metric`` first, else in the order they appear."""
    filters = filter_names(harness.build(cfg))
    found = [c for c in columns if "," in c and c.rsplit(",", 1)[1] in filters]
    primary = cfg.get("metric")
    return sorted(found, key=lambda c: c != primary)


def summarize(rows: pd.DataFrame, *, cfg=None) -> pd.DataFrame:
    """Each ``<metric>,<filter>`` over all rows with the task's aggregation (a mean over rows when the task
    names none), and its lm-eval standard error as ``<metric>_stderr,<filter>``."""
    from lm_eval.api.metrics import mean, stderr_for_metric

    task = harness.build(cfg)
    aggregations = task.aggregation()
    iters = int(cfg.get("bootstrap_iters", 1000))
    out = []
    for column in metric_columns(cfg, rows.columns):
        metric, filter_name = column.rsplit(",", 1)
        values = rows[column].dropna().tolist()
        agg = aggregations.get(metric, mean)
        out.append({"metric": column, "group": "all", "value": float(agg(values)), "n": len(values)})
        stderr = stderr_for_metric(agg, iters)
        if stderr is not None and len(values) > 1:
            out.append({"metric": f"{metric}_stderr,{filter_name}", "group": "all", "value": float(stderr(values)),
                        "n": len(values)})  # fmt: skip
    return pd.DataFrame(out, columns=["metric", "group", "value", "n"])
