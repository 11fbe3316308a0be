"""``python -m evals.search [-m] <evals.run overrides> search.max_loss=M [search.alpha=A] [search.budgets=[...]]``.

Every combination of the overrides (``-m``: Hydra's sweep expansion) is composed and checked before anything runs
(no data read, no weights loaded); then one search per combination runs its jobs in this process through
:func:`evals.execute.loop.run` (the procedure: :mod:`evals.search`). Exit 2 with one line per bad input; Ctrl-C
exits 130 and the same command resumes.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from evals.analysis.estimands import POPULATION
from evals.analysis.sequential import ABOUT, run_sequence
from evals.analysis.these_items import population_limit
from evals.report.search_measure import headline_of, kv_ratio, longest_prompt, measure
from evals.search import output
from evals.search.options import FIRST_BUDGET, STORAGE, SearchOptions, split_args
from evals.search.runs import (
    budget_knob,
    check_searchable,
    check_storage_search,
    full_cache_overrides,
    in_model_dtype,
)

log = logging.getLogger("evals.search")


def say(line: str) -> None:
    print(line, flush=True)


def _compose(overrides: list[str]):
    from hydra import compose

    return compose(config_name="config", overrides=overrides)


def search_one(combo: list[str], opts: SearchOptions) -> str:
    """Run one search (inside an initialised Hydra); returns its answer line."""
    from evals.config.spec import check
    from evals.execute.loop import run

    cfg = _compose(combo)
    model, task, method = str(cfg.model.name), str(cfg.task.name), str(cfg.compression.method)
    fmt = check(cfg, offline=True).method.kv_format
    storage = opts.reference == STORAGE  # each budget against the same run in the model's dtype
    title = f"{task} · {model} · {method}" + (f" · {fmt.label}" if fmt.quantized else "")
    say(f"search: {title}: running (or reusing) the full cache in the model's dtype, the reference of every test"
        if not storage else f"search: {title}: running (or reusing) the full cache in the model's dtype (the "
        "longest prompt); each budget is tested against the same run in the model's dtype")
    reference = headline_of(run(check(_compose(full_cache_overrides(combo)))), task)
    longest = longest_prompt(reference.run_dir)
    knob = budget_knob(str(cfg.compression.method))
    from snapstream_core.methods import METHODS

    whole = METHODS[method].budget_cap == "cache"  # the budget bounds the prompt and what is generated
    budgets = opts.budget_list(longest + int(cfg.gen.max_new_tokens) if whole else longest)
    if method == "none":  # the full cache stored quantized: one test, no budget (shown as 0)
        budgets = [0]
    ratios, cfgs, refs = {}, {}, {}
    for b in budgets:
        job = combo if method == "none" else [*combo, f"{knob}={b}"]
        cfgs[b] = _compose(job)
        refs[b] = _compose(in_model_dtype(job)) if storage else None
        c = check(cfgs[b], offline=True)
        ratios[b] = kv_ratio(c.method, longest, c.sampling.max_new_tokens)
    about = ABOUT[opts.estimand]
    say(f"search: {title}: budgets {', '.join(map(str, budgets))} (longest prompt {longest} tokens), "
        f"loss < {opts.max_loss:g} {about} (search.estimand={opts.estimand}) at family-wise alpha {opts.alpha:g}, "
        "largest first")
    limit = limit_line(opts, len(reference.items), 100.0 if reference.unit == "%" else 1.0)
    if limit:
        say(f"search: {title}: {limit}")

    def measured(b: int):
        against = headline_of(run(check(refs[b])), task) if storage else reference  # same method and budget
        return measure(b, headline_of(run(check(cfgs[b])), task), against, ratios[b], opts.max_loss, opts.alpha,
                       opts.estimand)

    steps = run_sequence(budgets, measured, opts.alpha, say)
    out_root = Path(str(cfg.out_root))
    table = output.rows(model, task, method, steps, opts.max_loss, opts.alpha, ratios, overrides=combo,
                        estimand=opts.estimand, reference=opts.reference)
    line = (output.storage_line(steps, fmt.label, opts.max_loss, opts.alpha, reference.unit, opts.estimand)
            if storage else output.answer_line(steps, opts.max_loss, opts.alpha, reference.unit, ratios,
                                               opts.estimand))
    output.record(out_root, title, table, steps, opts.max_loss, opts.alpha, say, method,  # never raises
                  draw=not storage)
    say(line)
    return line


def limit_line(opts: SearchOptions, items: int, scale: float) -> str | None:
    """For the ``population`` estimand on fewer items than :func:`population_limit`: one line saying that no valid
    test can show the margin there (None otherwise)."""
    if opts.estimand != POPULATION:
        return None
    need = population_limit(opts.max_loss / scale, opts.alpha)
    if items >= need:
        return None
    return (f"population: {items} items cannot show a loss below {opts.max_loss:g} at alpha {opts.alpha:g} "
            f"(any valid test needs at least {need} unchanged items: log(alpha)/log(1 - margin)); "
            "search.estimand=these_items asks about these items")


def _combos(rest: list[str], opts: SearchOptions) -> list[list[str]]:
    """Every combination, composed and checked (one line per bad one: ``UserError``)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from evals.cli import validate
    from evals.config.conf_store import register_methods
    from evals.config.overrides import CONF, UserError, expand
    from evals.config.spec import check

    multirun = any(a in ("-m", "--multirun") for a in rest)
    given = [a for a in rest if not a.startswith("-")]
    register_methods()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            combos = expand(given, multirun)
            bad, knobs = [], set()
            for combo in combos:
                try:
                    cfg = _compose(combo)
                    method = str(cfg.compression.method)
                    check_searchable(method, cfg.task.get("module") or cfg.task.name, cfg.task.name,
                                     storage=opts.reference == STORAGE)
                    check_storage_search(check(cfg, offline=True).method, opts.reference)
                    if method == "none" and opts.budgets:
                        raise ValueError("search.budgets: the full cache has no budget (search.reference=storage "
                                         "tests it once against the full cache in the model's dtype)")
                    knob = budget_knob(method)
                    if method != "none":
                        knobs.add(knob)
                    context = cfg.model.get("max_context") or (cfg.model.get("shape") or {}).get("max_positions")
                    if context is not None:
                        opts.check_context(int(context), str(cfg.model.name))
                    for b in opts.budgets or ():  # each given budget, as its run will be checked
                        check(_compose([*combo, f"{knob}={b}"]), offline=True)
                except Exception as exc:  # ValueError, or Hydra's composition errors
                    swept = " ".join(o for o in combo if o not in given)
                    bad.append(f"{swept}: {exc}" if swept else str(exc).splitlines()[0])
    finally:
        GlobalHydra.instance().clear()
    if not bad:
        first = opts.budgets[0] if opts.budgets else FIRST_BUDGET
        bad = validate([*rest, *(f"{k}={first}" for k in sorted(knobs))])  # evals.run's own checks, every combination
    if bad:
        raise UserError("\n".join(dict.fromkeys(bad)))
    return combos


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    unknown = [a for a in argv if a.startswith("-") and a not in ("-m", "--multirun")]
    if unknown:
        print(f"error: {unknown[0]}: not an option of evals.search (only -m/--multirun, then key=value overrides)",
              file=sys.stderr)
        return 2
    ours = not logging.getLogger().handlers  # a command line; else (a test, an embedding program) theirs to keep
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from evals.config.overrides import CONF, UserError
    from evals.logonce import install

    if ours:
        install()  # every warning once, on the handler just made (never on a caller's handlers)
    try:
        opts, rest = split_args(argv)
        combos = _combos(rest, opts)
    except (ValueError, UserError) as exc:
        for line in str(exc).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            for combo in combos:
                search_one(combo, opts)
    except KeyboardInterrupt:
        print("\ninterrupted: finished runs and rows are kept; the same command resumes", file=sys.stderr)
        return 130
    except (ValueError, UserError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    finally:
        GlobalHydra.instance().clear()
    return 0


if __name__ == "__main__":
    from evals.cpus import prepare

    prepare()  # thread counts and passive waiting, before torch loads
    sys.exit(main())
