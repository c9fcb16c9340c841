"""dgbench project (issue 17): the dry run counts exactly what real runs send, the papers' volume laws
hold in it, the collective formulas and fits are the cited ones, and projections stay in their own
board section.

The exactness test trains every registered scheme (one launch per world size, P = 2 and 4) and compares
the dry run's bytes per tag with what the ranks counted, tag by tag, the control tag included; a new
scheme is covered by registering it. Sven's default (n from Eq. 12 at run time) is dry-run with the n
its run chose, and BLAD's default (its plan from the first epoch's profile) with the plan its run made; a
steady-state epoch (the second) is compared, as the dry run describes.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.trainers.projection import collectives
from dgbench.trainers.projection.calibrate import nonnegative_fit
from dgbench.trainers.projection.dryrun import at_world, dry_run, measured_by_tag
from dgbench.trainers.projection.hardware import load_profile
from dgbench.trainers.projection.projection import project_epoch, scaling
from dgbench.registry import SCHEMES, load_plugins
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import run_experiments

load_plugins("dgbench.trainers")
DISCRETE = dict(epochs=2, hidden=6, seed=7)
CONTINUOUS = dict(epochs=2, batch_size=200, memory_dim=16, neighbors=5, seed=3)
MODELS = {"discrete": ("cdgcn", "tmgcn"), "continuous": ("tgn", "apan")}  # carries / windows; sampled / mailed
QUICK_MODELS = {"discrete": ("cdgcn",), "continuous": ("tgn",)}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def snapshot_store(tmp_path_factory) -> Path:
    from dgbench.generators.esdg_random import build
    return build(out=tmp_path_factory.mktemp("project") / "snapshots.zarr", nodes=48, snapshots=9, edge_factor=3.0,
                 seed=11)


@pytest.fixture(scope="module")
def event_store(tmp_path_factory) -> Path:
    from dgbench.generators.stream import build
    return build(out=tmp_path_factory.mktemp("project") / "stream.zarr", users=60, items=50, events=1400, edge_dim=4,
                 seed=5)


def _models(scheme, thorough: bool) -> list[str]:
    wanted = (MODELS if thorough else QUICK_MODELS)[scheme.family]
    allowed = getattr(scheme, "models", None)
    if allowed is None:
        return list(wanted)
    return [m for m in wanted if m in allowed] or [allowed[0]]


def _undeclared(scheme) -> bool:
    """A continuous scheme with its own driver that does not say what it sends cannot be dry-run."""
    from dgbench.trainers.contract import ContinuousScheme
    return (scheme.family == "continuous" and type(scheme).train_rank is not ContinuousScheme.train_rank
            and type(scheme).dry_run_sends is ContinuousScheme.dry_run_sends)


def _configs(family: str, store: Path, world: int, thorough: bool) -> list[RunConfig]:
    """Every scheme allowed at ``world`` ranks; thorough: with each of its conformance option sets and more
    models."""
    base = DISCRETE if family == "discrete" else CONTINUOUS
    out = []
    for scheme in sorted((s for s in SCHEMES.values() if s.family == family), key=lambda s: s.name):
        if scheme.world.problem(scheme.name, world) is None:
            for variant in ({}, *scheme.conformance) if thorough else ({},):
                out += [RunConfig(scheme.name, model, store, nproc=world, out=store.parent / "runs", **base, **variant)
                        for model in _models(scheme, thorough)]
    return out


def _train(snapshot_store: Path, event_store: Path, thorough: bool) -> dict[int, list[tuple[RunConfig, dict]]]:
    out = {}
    for world in (2, 4):
        configs = _configs("discrete", snapshot_store, world, thorough) + \
            _configs("continuous", event_store, world, thorough)
        out[world] = list(zip(configs, run_experiments(configs)))
    return out


@pytest.fixture(scope="module")
def real_runs(snapshot_store, event_store) -> dict[int, list[tuple[RunConfig, dict]]]:
    return _train(snapshot_store, event_store, thorough=False)


@pytest.fixture(scope="module")
def thorough_runs(snapshot_store, event_store) -> dict[int, list[tuple[RunConfig, dict]]]:
    return _train(snapshot_store, event_store, thorough=True)


def _nonzero(by_tag: dict[str, int]) -> dict[str, int]:
    return {tag: n for tag, n in by_tag.items() if n}


def _compare(runs: list[tuple[RunConfig, dict]], world: int) -> None:
    missing = set()
    for config, record in runs:
        if _undeclared(SCHEMES[f"{record['family']}:{config.scheme}"]):
            with pytest.raises(DgbenchError, match="dry_run_sends"):
                dry_run(config)
            missing.add(config.scheme)
            continue
        eq12 = (record["extra"].get("microbatches") or {}).get("n") if record["family"] == "continuous" else None
        blad = record["extra"].get("blad") if record["family"] == "discrete" else None
        profiled = blad if blad and blad["durations"]["source"] == "profiled" else None  # the plan it measured
        dry = dry_run(config, eq12_n=eq12, blad_plan=profiled)
        where = f"{config.scheme} {config.options} {config.model} P={world}"
        assert _nonzero(dry.bytes_by_tag()) == _nonzero(measured_by_tag(record)), where
        if record["family"] == "continuous" and "scheme_predicted_bytes" in dry.extra:  # its Eq. 7-9 form too
            predicted = record["extra"]["predicted_bytes"]
            assert dry.extra["scheme_predicted_bytes"]["dispatch"] == pytest.approx(predicted["dispatch"]), where
            assert dry.extra["scheme_predicted_bytes"]["aggregation"] == pytest.approx(predicted["aggregation"]), where
    if missing:  # every other scheme was compared above; these train through a driver of their own
        pytest.xfail(f"no dry-run path (ContinuousScheme.dry_run_sends) for: {', '.join(sorted(missing))}")


@pytest.mark.parametrize("world", (2, 4))
def test_dry_run_counts_exactly_what_real_runs_send(real_runs, world):
    _compare(real_runs[world], world)


@pytest.mark.slow
@pytest.mark.parametrize("world", (2, 4))
def test_dry_run_is_exact_for_every_conformance_option_set_and_more_models(thorough_runs, world):
    _compare(thorough_runs[world], world)


def test_every_registered_scheme_was_compared(real_runs):
    compared = {(c.scheme, r["family"]) for runs in real_runs.values() for c, r in runs}
    multi_rank = {(s.name, s.family) for s in SCHEMES.values() if s.world.problem(s.name, 2) is None}
    assert multi_rank <= compared, multi_rank - compared


# --------------------------------------------------------------------------- laws the papers state

@pytest.fixture(scope="module")
def even_store(tmp_path_factory) -> Path:
    """64 vertices and 16 input steps: both divide evenly by P = 2, 4, 8."""
    from dgbench.generators.esdg_random import build
    return build(out=tmp_path_factory.mktemp("laws") / "even.zarr", nodes=64, snapshots=17, edge_factor=3.0, seed=2)


def test_snapshot_partitioning_moves_TNF_times_P_minus_1_over_P_per_redistribution(even_store):
    """ESDG §4.2: each redistribution moves T·N·F·(P-1)/P, which approaches T·N·F (flat in P)."""
    from dgbench.registry import MODELS
    model = MODELS["discrete:cdgcn"].build(MODELS["discrete:cdgcn"].options(), in_features=2, hidden=6)
    to_vertex = sum(width for width, _ in model.feature_widths())
    steps, nodes = 16, 64
    limits = []
    for world in (2, 4, 8):
        dry = dry_run(RunConfig("snapshot", "cdgcn", even_store, nproc=world, epochs=1, hidden=6))
        moved = dry.tags["to_vertex:forward"].elements
        assert moved == steps * nodes * to_vertex * (world - 1) // world
        limits.append(moved * world / (world - 1))
        sent = dry.tags["to_vertex:forward"].sent[0]
        assert (sent == sent[0]).all()  # every rank sends the same share
    assert limits == [steps * nodes * to_vertex] * 3


def test_vertex_partitioning_volume_grows_with_P(even_store):
    halo = [dry_run(RunConfig("vertex", "cdgcn", even_store, nproc=world, epochs=1, hidden=6, partition="range"))
            .tags["halo:forward"].elements for world in (2, 4, 8)]
    assert halo[0] < halo[1] < halo[2]


@pytest.fixture(scope="module")
def law_stream(tmp_path_factory) -> Path:
    from dgbench.generators.stream import build
    return build(out=tmp_path_factory.mktemp("laws") / "stream.zarr", users=80, items=60, events=1200, edge_dim=4,
                 seed=9)


def test_depcache_volume_is_proportional_to_P_while_depcomm_and_sven_are_not(law_stream):
    """Sven Eq. 7-9 (§5.3.3): DepCache's volume is proportional to the number of trainers (each one's
    deduplicated updates go to every other replica), DepComm's and Sven's are not; checked on the
    schemes' own predicted volumes (their per-rank Eq. 7-9 forms). Per trainer, Alg. 2 deduplicates only
    its own share of a batch, so Sven's volume still grows with P towards its no-deduplication bound
    (docs/projection.md), but per peer it falls; DepCache's per-peer volume does not."""
    def volumes(scheme: str, world: int) -> tuple[float, float]:
        """The scheme's own Eq. 7-9 form, and the dry run's counted bytes of the N&M state (ids included)."""
        dry = dry_run(RunConfig(scheme, "tgn", law_stream, nproc=world, epochs=1, batch_size=300, memory_dim=16,
                                neighbors=5, seed=1, **({"partition": "range"} if scheme != "depcache" else {})))
        predicted = dry.extra["scheme_predicted_bytes"]
        counted = sum(n for tag, n in dry.bytes_by_tag().items() if tag.startswith("nm_"))
        return predicted["dispatch"] + predicted["aggregation"], counted
    worlds = (2, 4, 8)
    measured = {scheme: [volumes(scheme, w) for w in worlds] for scheme in ("depcache", "depcomm", "sven")}
    for form in (0, 1):  # the schemes' Eq. 7-9 forms, then the dry run's counts
        per_peer = {scheme: [v[form] / (w - 1) for v, w in zip(by_world, worlds)]
                    for scheme, by_world in measured.items()}
        assert per_peer["depcache"][0] <= per_peer["depcache"][1] <= per_peer["depcache"][2], form
        for scheme in ("depcomm", "sven"):
            assert per_peer[scheme][0] > per_peer[scheme][1] > per_peer[scheme][2], (scheme, form)
            growth = per_peer[scheme][2] * 7 / per_peer[scheme][0]
            assert growth < per_peer["depcache"][2] * 7 / per_peer["depcache"][0], (scheme, form)


# --------------------------------------------------------------------------- formulas, fits, profiles

def test_collective_formulas_are_the_cited_ones():
    net = collectives.Network(collectives.Link(1e-5, 1e9), collectives.Link(2e-5, 1e8), ranks_per_node=4)
    n, p = 8e6, 8
    # large messages take the ring, small ones the tree (as NCCL chooses)
    assert collectives.all_reduce(n, p, net) == pytest.approx(2 * (p - 1) * 2e-5 + 2 * (p - 1) / p * n / 1e8)
    assert collectives.all_reduce(8.0, p, net) == pytest.approx(2 * math.ceil(math.log2(p)) * 2e-5 + 2 * 8.0 / 1e8)
    one_node = collectives.Network(collectives.Link(1e-5, 1e9), collectives.Link(2e-5, 1e8), ranks_per_node=8)
    even = np.full(p, n)
    # pairwise exchange, one node: (p-1) alpha + n beta (Thakur et al. 2005)
    assert collectives.all_to_all(even, even, np.zeros(p), np.zeros(p), one_node) == pytest.approx(7e-5 + n / 1e9)
    # two nodes: each node's NIC carries its ranks' crossing bytes
    pairs = np.full((p, p), n / (p - 1))
    np.fill_diagonal(pairs, 0)
    out, into = collectives.inter_fractions(pairs, net)
    assert out == pytest.approx(np.full(p, 4 / 7))
    node_bytes = 4 * n * 4 / 7
    assert collectives.all_to_all(even, even, out, into, net) == pytest.approx(7 * 2e-5 + node_bytes / 1e8)
    assert collectives.all_gather(np.full(p, 1e6), one_node) == pytest.approx(7 * (1e-5 + 1e6 / 1e9))


def test_nonnegative_fit_recovers_rates():
    rng = np.random.default_rng(0)
    features = rng.uniform(1, 10, size=(8, 3))
    truth = np.array([2.0, 0.0, 0.5])
    coefficients, fit = nonnegative_fit(features, features @ truth)
    assert coefficients == pytest.approx(truth, abs=1e-9)
    assert fit["max_relative_error"] < 1e-9


def test_profiles_say_where_their_numbers_come_from(tmp_path):
    esdg = load_profile("esdg-aimos")
    assert esdg.source == "spec-sheet" and esdg.network.ranks_per_node == 8
    assert esdg.network.inter.bandwidth == 25e9  # dual 100 Gb/s EDR per node (ESDG §6.1)
    with pytest.raises(DgbenchError, match="no discrete rates"):
        esdg.rates("discrete", "cdgcn")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "dgbench.hardware", "version": 1, "name": "x", "source": "spec-sheet",
                               "ranks_per_node": 2, "device": {}, "links": {"intra": {"alpha_s": 1e-6}}}))
    with pytest.raises(DgbenchError, match="bad.json: link 'intra' needs alpha_s and bandwidth"):
        load_profile(bad)


def _profile(tmp_path: Path, **compute) -> Path:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({
        "schema": "dgbench.hardware", "version": 1, "name": "test", "source": "calibrated", "ranks_per_node": 2,
        "device": {"name": "cpu", "memory_bandwidth": 1e10},
        "links": {"intra": {"alpha_s": 1e-4, "bandwidth": 1e8}, "inter": {"alpha_s": 1e-3, "bandwidth": 1e7}},
        "compute": compute}))
    return path


def test_projection_prices_the_counts_and_scales_spec_sheets_by_bandwidth(even_store, tmp_path):
    rates = {"per_edge_s": 1e-7, "per_cell_s": 1e-6, "per_step_s": 1e-4}
    calibrated = load_profile(_profile(tmp_path, discrete={"cdgcn": rates}))
    one, four = (dry_run(RunConfig("snapshot" if w > 1 else "single", "cdgcn", even_store, nproc=w, epochs=1, hidden=6))
                 for w in (1, 4))
    p1, p4 = project_epoch(one, calibrated), project_epoch(four, calibrated)
    assert p1["communication_s"] == 0
    assert p1["compute_s"] == pytest.approx(1e-7 * one.work["edges"][0] + 1e-6 * one.work["cells"][0]
                                            + 1e-4 * one.work["steps"][0])
    assert p4["compute_s"] < p1["compute_s"] and p4["communication_s"] > 0
    assert p4["time_s"] == pytest.approx(p4["compute_s"] + p4["communication_s"])
    spec = load_profile("esdg-aimos")
    scaled = project_epoch(one, spec, basis=calibrated)
    overhead = 1e-4 * one.work["steps"][0]  # per-step overheads are not scaled, memory-bound work is
    assert scaled["compute_s"] == pytest.approx((p1["compute_s"] - overhead) * 1e10 / 900e9 + overhead)
    assert "roofline" in scaled["rates_source"]
    points = scaling([{**p1, "world_size": 1}, {**p4, "world_size": 4}], "strong")
    assert points[1]["speedup"] == pytest.approx(p1["time_s"] / p4["time_s"])
    assert points[1]["efficiency"] == pytest.approx(points[1]["speedup"] / 4)


def _profile_with_overhead(tmp_path: Path, per_call_s: float) -> Path:
    path = _profile(tmp_path, discrete={"cdgcn": {"per_edge_s": 1e-7, "per_cell_s": 1e-6, "per_step_s": 1e-4}})
    document = json.loads(path.read_text())
    document["scheme_overheads"] = {"discrete": {"snapshot": {"cdgcn": {"per_call_s": per_call_s}}}}
    path.write_text(json.dumps(document))
    return path


def test_a_calibrated_scheme_overhead_is_priced_per_collective_call_and_only_on_its_own_machine(even_store, tmp_path):
    calibrated = load_profile(_profile_with_overhead(tmp_path, 1e-3))
    one, four = (dry_run(RunConfig("snapshot" if w > 1 else "single", "cdgcn", even_store, nproc=w, epochs=1, hidden=6))
                 for w in (1, 4))
    calls = sum(int(v.calls.sum()) for v in four.tags.values())  # the discrete epoch is one unit, every call counted
    assert calls > 0
    p4 = project_epoch(four, calibrated)
    assert p4["scheme_overhead_s"] == pytest.approx(1e-3 * calls)
    assert p4["time_s"] == pytest.approx(p4["compute_s"] + p4["communication_s"] + 1e-3 * calls)
    assert any("scheme overhead" in note for note in p4["notes"])
    assert project_epoch(one, calibrated)["scheme_overhead_s"] == 0  # P = 1: nothing exchanged
    vertex = dry_run(RunConfig("vertex", "cdgcn", even_store, nproc=4, epochs=1, hidden=6))
    assert project_epoch(vertex, calibrated)["scheme_overhead_s"] == 0  # not calibrated for that scheme
    spec = project_epoch(four, load_profile("esdg-aimos"), basis=calibrated)
    assert spec["scheme_overhead_s"] == 0  # this machine's gloo and CPU say nothing of a GPU cluster's


def test_sven_overhead_counts_its_dispatch_once_per_batch_whatever_n(event_store, tmp_path):
    """The overhead is calibrated at n = 1; extra chunks are per_microbatch_s's, so n must not multiply it."""
    path = _profile(tmp_path, continuous={"tgn": {"per_event_s": 1e-6, "per_position_s": 1e-6, "per_batch_s": 1e-3,
                                                  "per_microbatch_s": 1e-3}})
    document = json.loads(path.read_text())
    document["scheme_overheads"] = {"continuous": {"sven": {"tgn": {"per_call_s": 1e-3}}}}
    path.write_text(json.dumps(document))
    profile = load_profile(path)
    one, four = (dry_run(RunConfig("sven", "tgn", event_store, nproc=2, epochs=1), eq12_n=n) for n in (1, 4))
    assert four.tags["nm_dispatch"].calls.sum() == 4 * one.tags["nm_dispatch"].calls.sum()
    at_one, at_four = project_epoch(one, profile), project_epoch(four, profile)
    calls = sum(int(v.calls.sum()) for v in one.tags.values())
    assert at_one["scheme_overhead_s"] == pytest.approx(1e-3 * calls)
    assert at_four["scheme_overhead_s"] == pytest.approx(at_one["scheme_overhead_s"])


def test_calibration_fits_the_overhead_per_call_to_what_P2_runs_spend_beyond_the_projection(snapshot_store, tmp_path):
    """The fit's arithmetic on two P = 2 runs of six epochs; any small store serves (the real-runs one: 8 steps)."""
    from dgbench.trainers.projection.calibrate import EPOCHS, _scheme_overheads
    nothing = json.loads(_profile(tmp_path, discrete={"cdgcn": {"per_edge_s": 0.0, "per_cell_s": 0.0,
                                                                 "per_step_s": 0.0}}).read_text())
    nothing["links"] = {kind: {"alpha_s": 0.0, "bandwidth": 1e30} for kind in ("intra", "inter")}
    inputs = {"discrete": [{"dataset": snapshot_store, "hidden": 4}, {"dataset": snapshot_store, "hidden": 6}]}
    fitted = _scheme_overheads({"wall": nothing}, {"discrete": ["cdgcn"]}, {"discrete": ("snapshot",)}, inputs,
                               tmp_path)["wall"]["discrete"]["snapshot"]["cdgcn"]
    fit = fitted["fit"]
    assert fit["points"] == 2 and fit["projected_without_s"] == [0.0, 0.0] and EPOCHS > 2
    # priced at nothing, the whole epoch is overhead: per call, the least-squares ratio of epoch to calls
    calls, measured = np.array(fit["calls"]), np.array(fit["measured_s"])
    assert calls.min() > 0 and fitted["per_call_s"] > 0
    assert fitted["per_call_s"] * calls == pytest.approx(measured * (1 + np.array(fit["relative_errors"])), rel=1e-3)


def test_calibrate_refuses_an_unknown_overhead_scheme(tmp_path):
    from click.testing import CliRunner

    from dgbench.cli import cli as main
    result = CliRunner().invoke(main, ["project", "calibrate", "-o", str(tmp_path / "p.json"),
                                       "--overhead-schemes", "snapshot,nosuch"])
    assert result.exit_code != 0 and "no scheme 'nosuch'" in result.output
    assert not (tmp_path / "p.json").exists()


def test_dry_run_refuses_what_it_cannot_count(even_store):
    with pytest.raises(DgbenchError, match="unknown discrete-time scheme"):
        dry_run(RunConfig("no-such-scheme", "cdgcn", even_store, nproc=2))
    assert at_world(RunConfig("vertex", "cdgcn", even_store, nproc=2, blocks=2), 8).nproc == 8


# --------------------------------------------------------------------------- the board and the CLI

def test_projections_have_their_own_board_section(even_store, tmp_path):
    from click.testing import CliRunner
    from dgbench.cli import cli as main
    from dgbench.leaderboard.render import render
    board = tmp_path / "board"
    (board / "projected").mkdir(parents=True)
    profile = _profile(tmp_path, discrete={"cdgcn": {"per_edge_s": 1e-7, "per_cell_s": 1e-6, "per_step_s": 1e-4}})
    out = board / "projected" / "strong.json"
    result = CliRunner().invoke(main, ["--quiet", "project", "strong", str(even_store), "--scheme", "snapshot",
                                       "--model", "cdgcn", "--worlds", "1,2,4", "--profile", str(profile),
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["projected"] is True and [p["world_size"] for p in document["points"]] == [1, 2, 4]
    assert document["points"][0]["dry_run"]["store"]["fingerprint"] and document["code"]["commit"]
    markdown = render(board, "md")
    assert "## Projected scaling (not measured)" in markdown
    measured, projected = markdown.split("## Projected scaling (not measured)")
    assert "| snapshot |" not in measured and "| strong | snapshot | cdgcn |" in projected
    assert "nothing overlapped" in projected and "Sven rows are a pessimistic bound" in projected  # how it's priced
    html = render(board, "html")
    assert html.index('id="projected"') > html.index('id="throughput"')
    (board / "projected" / "record.json").write_text(json.dumps({"schema": "dgbench.record"}))
    with pytest.raises(DgbenchError, match="record.json: not a dgbench projection"):
        render(board, "md")


def test_dryrun_command_writes_its_counts(event_store, tmp_path):
    from click.testing import CliRunner
    from dgbench.cli import cli as main
    out = tmp_path / "dry.json"
    result = CliRunner().invoke(main, ["--quiet", "project", "dryrun", str(event_store), "--scheme", "sven",
                                       "--model", "tgn", "--nproc", "3", "--set", "batch_size=300",
                                       "--set", "microbatches=2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["world_size"] == 3 and document["tags"]["nm_dispatch"]["bytes"] > 0
    assert document["tags"]["nm_dispatch"]["calls"] == 2 * document["units"]  # two micro-batches per batch
    assert document["store"]["fingerprint"] and document["command"].startswith("dgbench project dryrun")
    bad = CliRunner().invoke(main, ["project", "dryrun", str(event_store), "--scheme", "sven", "--model", "tgn",
                                    "--nproc", "2", "--set", "batch_size"])
    assert bad.exit_code == 1 and "expected NAME=VALUE" in bad.output


def test_kept_dry_runs_price_again_to_the_same_curve(even_store, tmp_path):
    from click.testing import CliRunner
    from dgbench.cli import cli as main
    profile = _profile(tmp_path, discrete={"cdgcn": {"per_edge_s": 1e-7, "per_cell_s": 1e-6, "per_step_s": 1e-4}})
    kept, first, again = tmp_path / "kept", tmp_path / "strong.json", tmp_path / "priced.json"
    result = CliRunner().invoke(main, ["--quiet", "project", "strong", str(even_store), "--scheme", "snapshot",
                                       "--model", "cdgcn", "--worlds", "1,2,4", "--profile", str(profile),
                                       "-o", str(first), "--keep-dryruns", str(kept)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["--quiet", "project", "price", *map(str, sorted(kept.glob("*.npz"))),
                                       "--mode", "strong", "--profile", str(profile), "-o", str(again)])
    assert result.exit_code == 0, result.output
    measured = ("world_size", "time_s", "compute_s", "communication_s", "bytes", "speedup")
    curve = [[p[k] for k in measured] for p in json.loads(first.read_text())["points"]]
    assert curve == [[p[k] for k in measured] for p in json.loads(again.read_text())["points"]]
    command = json.loads(again.read_text())["command"]
    assert command.startswith("dgbench project price ")  # and names every dry run priced, as a user re-types it
    assert all(f" {path} " in command for path in sorted(kept.glob("*.npz"))) and "PosixPath" not in command
    bad = CliRunner().invoke(main, ["project", "price", str(first), "--mode", "strong", "--profile", str(profile)])
    assert bad.exit_code == 1 and "not a dry run kept by --keep-dryruns" in bad.output
