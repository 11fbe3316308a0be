"""The engine driven one step at a time (``start / fill / step / harvest``) on ``tiny_llama``, for every registered
method: each busy row holds exactly ``method.tokens_held(T, k)`` entries after its k-th step (its visible slots, every
layer and KV head; the decode-time methods compact on their schedule), the bench's engine rows (``bench.engine_rows``)
hold the same, compiled and eager, with the same tokens; and ``Engine.run`` is that step loop."""

from __future__ import annotations

import pytest
import torch

import snapstream_core as ss
from bench.engine_rows import EngineRows
from snapstream_core.calibration import query_statistics, save_stats
from snapstream_core.engine import Engine, EngineItem
from snapstream_core.methods import METHODS
from snapstream_core.methods.decode_base import DecodeMethod
from tests.method_matrix import prompts

STEPS = 40
LENGTHS = (40, 33)  # two rows that reach their compactions at different steps
# knobs small enough that every method cuts or compacts these prompts within STEPS (a method takes those it has)
KNOBS = dict(prompt_budget=24, budget=24, interval=8, recent=8, window=4, kernel=3, sinks=4, group_size=8,
             residual=16)


@pytest.fixture(scope="module")
def files(tiny_model, tmp_path_factory):
    """The run files a method reads (``run_files``), made for ``tiny_model``."""
    ids = torch.tensor([prompts((64,), seed=3)[0]])
    q_mean, q_abs_mean = query_statistics(tiny_model, ids)
    rope = tiny_model.config.rope_parameters
    path = save_stats(tmp_path_factory.mktemp("calibration") / "tiny.safetensors", q_mean, q_abs_mean,
                      n_kv_heads=tiny_model.config.num_key_value_heads, rope_theta=float(rope["rope_theta"]),
                      rope_type=str(rope.get("rope_type", "default")))
    return {"calibration": str(path)}


def build(name: str, files: dict[str, str]):
    """The method at :data:`KNOBS` (its class's ``from_bench``: the knobs it has) with its run files."""
    cls = METHODS[name]
    missing = [f for f in cls.run_files if f not in files]
    assert not missing, f"{name}: make its run file(s) {missing} in the ``files`` fixture"
    return cls.from_bench({**KNOBS, **files})


def held_ok(held: torch.Tensor, rows: dict[int, int], method, k: int) -> None:
    """Every layer and KV head of each row ``r`` (prompt ``rows[r]``) holds ``tokens_held(T, k)`` entries; a ragged
    method's layers and heads hold their own counts, ``tokens_held`` on average (to the rounding of a mean), each
    one more after every step, never more than the row's slots."""
    for r, T in rows.items():
        want = method.tokens_held(T, k)
        if method.storage_kind == "ragged":
            mean = held[:, r].double().mean().item()
            assert abs(mean - want) <= 0.5 and int(held[:, r].max()) <= method.slots(T, STEPS + 1), (r, k, mean)
            continue
        got = held[:, r].unique().tolist()
        assert got == [want], f"{method.method}: row {r} (T={T}) holds {got} after step {k}, the method {want}"


@pytest.mark.parametrize("name", list(METHODS))
def test_each_row_holds_the_methods_entries_after_every_step(tiny_model, files, name):
    method = build(name, files)
    ps = prompts(LENGTHS, seed=1)
    eng = Engine(tiny_model, method, ss.SamplingConfig(max_new_tokens=STEPS + 1), eos=[], rows=2)
    eng.start([EngineItem(p, i, (0,), STEPS + 1) for i, p in enumerate(ps)])
    assert eng.fill() and eng.busy_rows() == [0, 1]
    rows = {0: len(ps[0]), 1: len(ps[1])}
    held_ok(eng.held_entries(), rows, method, 0)
    for k in range(1, STEPS + 1):
        eng.step()
        held_ok(eng.held_entries(), rows, method, k)
    if isinstance(method, DecodeMethod):
        assert eng.stats.compactions == eng.compactor.calls >= 4
    ended = eng.harvest()
    assert eng.done and sorted(len(f.tokens) for f in ended) == [STEPS + 1] * 2


# the decode-time methods (those that compact) every time; the others' compiled runs with the slow tests
BENCH_CASES = [name if issubclass(cls, DecodeMethod) else pytest.param(name, marks=pytest.mark.slow)
               for name, cls in METHODS.items()]


@pytest.mark.parametrize("name", BENCH_CASES)
def test_the_benchs_rows_hold_the_methods_entries_compiled_and_eager(tiny_model, files, name):
    """The bench's engine cases: every step's held entries are the method's, and compiled = eager tokens."""
    method = build(name, files)
    (p,) = prompts((LENGTHS[0],), seed=2)
    tokens = {}
    for compiled in (False, True):
        case = EngineRows.start(tiny_model, method, p, 2, STEPS + 1, compile=compiled, compile_backend="eager")
        got = [case.token[:, 0].tolist()]
        for k in range(1, STEPS + 1):
            got.append(case(tiny_model)[:, 0].tolist())
            assert case.held() == [method.tokens_held(len(p), k)] * 2, (compiled, k)
        tokens[compiled] = got
    assert tokens[True] == tokens[False]


def test_run_is_the_step_loop(tiny_model):
    """``Engine.run`` and the step API driven by hand (fill, ``check_every`` steps, harvest) give the same samples."""
    method = ss.RKV(budget=24, interval=8, window=4)
    ps = prompts((30, 13, 21), seed=4)
    sampling = ss.SamplingConfig(max_new_tokens=20, temperature=0.8, top_p=0.95)
    items = [EngineItem(p, 3 + i, (0, 1), 20 - 3 * i) for i, p in enumerate(ps)]
    by_run = {(f.item.key, f.sample_idx): f.tokens for batch in
              Engine(tiny_model, method, sampling, eos=[], rows=4).run(items) for f in batch}
    eng = Engine(tiny_model, method, sampling, eos=[], rows=4)
    eng.start(items)
    by_hand = {}
    while True:
        eng.fill()
        if eng.done:
            break
        eng.step()
        by_hand.update({(f.item.key, f.sample_idx): f.tokens for f in eng.harvest()})
    assert by_hand == by_run and len(by_run) == 6


# snapkv_decode every time (3 s); the other decode-time methods (up to 20 s each on 2 cores) with the slow tests
MEASURED = [name if name == "snapkv_decode" else pytest.param(name, marks=pytest.mark.slow)
            for name, cls in METHODS.items() if issubclass(cls, DecodeMethod)]


@pytest.mark.parametrize("name", MEASURED)
def test_the_bench_measures_a_decode_time_method_on_the_engine(name):
    """``measure_group`` runs a decode-time method's eager and compiled cases on the engine (TriAttention with a
    calibration the bench makes for its model): the same tokens, and the entries its rows hold are the method's."""
    from bench.cases import Case, build_method
    from bench.measure import measure_group
    from bench.models import load
    from tests.test_bench import CFG
    from tests.test_bench import STEPS as BENCH_STEPS

    model, bench_prompts = load(CFG, 256)
    cases = [Case("sdpa", name, 160), Case("sdpa", name + "+compiled", 160)]
    eager, compiled = measure_group(model, bench_prompts, cases, CFG, keep_tokens=True)
    assert eager["status"] == compiled["status"] == "ok", (eager["status"], compiled["status"])
    assert compiled["compiled"] and not eager["compiled"] and compiled["tokens"] == eager["tokens"]
    held = build_method(name, CFG).tokens_held(160, BENCH_STEPS)
    assert eager["kv_tokens_final"] == compiled["kv_tokens_final"] == held


def test_a_compaction_hands_row_keys_and_attn_sum_to_the_method_and_moves_attn_sum_with_its_slots():
    """``compact_rows`` gives each layer's view the rows' noise keys and accumulated attention; the due row's
    ``attn_sum`` follows its kept slots (freed slots start at 0), the other row's is left as it was."""
    from dataclasses import dataclass

    from snapstream_core.engine.compact import compact_rows

    seen = []

    @dataclass(frozen=True)
    class BySum(ss.SnapKVDecode):  # keeps the slots with the most accumulated attention
        def compact_scores(self, view):
            seen.append(view.row_keys.tolist())
            return view.attn_sum

    method = BySum(budget=6, interval=4, window=2)
    L, R, H_kv, S, D = 2, 2, 2, 10, 4
    g = torch.Generator().manual_seed(0)
    keys = [torch.randn(R, H_kv, S, D, generator=g) for _ in range(L)]
    values = [torch.randn(R, H_kv, S, D, generator=g) for _ in range(L)]
    visible = torch.zeros(L, R, H_kv, S, dtype=torch.bool)
    visible[..., :9] = True
    pos = torch.arange(S).expand(L, R, H_kv, S).clone()
    attn = torch.rand(L, R, H_kv, S, generator=g)
    before = attn.clone()
    due = torch.tensor([True, False])
    kept = compact_rows(method, keys, values, visible, pos, None, torch.tensor([4, 4]), torch.tensor([8, 8]), due,
                        D**-0.5, None, torch.tensor([11, 22]), attn)
    assert seen == [[11, 22]] * L and kept.tolist() == [6, 9]
    for layer in range(L):
        for h in range(H_kv):
            top = before[layer, 0, h, :7].topk(4).indices.sort().values  # 4 best of the 7 candidates, + window 2
            moved = pos[layer, 0, h, :6]
            assert sorted(moved[:4].tolist()) == top.tolist() and moved[4:].tolist() == [7, 8]
            assert torch.equal(attn[layer, 0, h, :6], before[layer, 0, h, moved])
            assert not attn[layer, 0, h, 6:].any()
    assert torch.equal(attn[:, 1], before[:, 1])
