"""BLAD end to end (§3.1 group protocol, §5 two-level scheduling, §6 reordering): `blad` and `blad-nm`
train exactly like `single` under the same group protocol, move only what Table 3 and the in-device
hand-over predict, and the baselines run the same protocol. (The registry-driven conformance suite also
trains every discrete model with both schemes at P = 1, 2, 4 and their option sets.)"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import resolve, run_experiments

MODELS = ("wdgcn", "tgcn", "evolvegcn-o")  # BLAD §7.1's three models
BASE = dict(epochs=2, hidden=6, seed=5, group_length=4, smoothing="none", group_batch=2)  # BLAD's protocol defaults
STEPS = 3  # optimiser steps per epoch: 6 training targets (8 input steps), group_batch 2
CONTROL = {"counts", "loss", "evaluation", "blad:report"}  # shapes and scalars, not model data
FEATURE_TAGS = ("to_vertex", "to_time", "halo")  # Table 3's feature column


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    from dgbench.generators.esdg_random import build
    return build(out=tmp_path_factory.mktemp("blad") / "s.zarr", nodes=40, snapshots=9, edge_factor=3.0, seed=3)


def _config(scheme: str, model: str, store: Path, nproc: int, **options) -> RunConfig:
    return RunConfig(scheme, model, store, nproc=nproc, out=store.parent / "runs", **{**BASE, **options})


CASES = [("blad", {}, MODELS), ("blad-nm", {}, MODELS), ("blad", {"procs_per_device": 1}, MODELS),
         ("snapshot", {}, ("wdgcn",)), ("vertex", {"partition": "range"}, ("evolvegcn-o",))]


@pytest.fixture(scope="module")
def runs(store) -> dict:
    """Every case at P = 2 in one launch, and single's references in another (the conformance suite runs
    the whole matrix: every model, P = 1, 2, 4, each option set)."""
    keys = [(scheme, tuple(sorted(o.items())), model) for scheme, o, models in CASES for model in models]
    records = run_experiments([_config(s, m, store, 2, **dict(o)) for s, o, m in keys])
    references = run_experiments([_config("single", m, store, 1) for m in MODELS])
    return {"p2": dict(zip(keys, records)), "single": dict(zip(MODELS, references))}


def _losses(record: dict) -> list[float]:
    return [e["loss"] for e in record["epochs"]]


def _sent(record: dict) -> dict[str, int]:
    """Elements sent in the last epoch per tag, all ranks."""
    out: dict[str, int] = {}
    for rank in record["epochs"][-1]["per_rank"]:
        for tag, stats in rank["comm_by_tag"].items():
            out[tag] = out.get(tag, 0) + int(stats["elements"])
    return out


def test_every_scheme_follows_single_under_the_group_protocol(runs):
    for (scheme, options, model), record in runs["p2"].items():
        where = f"{scheme} {dict(options)} {model}"
        assert record["hyperparameters"]["group_length"] == 4, where
        np.testing.assert_allclose(_losses(record), _losses(runs["single"][model]), rtol=1e-5, err_msg=where)
        predicted = record["extra"].get("predicted_comm_elements") or {}
        sent = _sent(record)
        for tag, elements in predicted.items():
            assert sent.get(tag, 0) == elements, f"{where}: {tag}"


def test_blad_moves_only_gradients_across_devices_and_the_state_inside_one(runs):
    """Table 3's group row: p·W_GNN + p·W_RNN (+ the scorer), no feature column; in a device the state
    forward and its gradient back, as predicted from the state's size after p1's snapshots."""
    for (scheme, options, model), record in runs["p2"].items():
        if not scheme.startswith("blad"):
            continue
        where = f"{scheme} {dict(options)} {model}"
        table3, sent = record["extra"]["blad"]["table3"], _sent(record)
        parameters = record["extra"]["parameters"]
        assert record["extra"]["blad"]["sync"]["optimiser_steps"] == STEPS, where
        assert table3["features"] == 0 and sent.get("gradients", 0) == STEPS * table3["gradients_total"], where
        assert table3["gradients_total"] == table3["gnn_param"] + table3["rnn_param"] + table3["scorer_param"]
        model_data = {tag for tag, n in sent.items() if n and tag not in CONTROL and not tag.endswith(":wait")}
        if dict(options).get("procs_per_device") == 1:  # two devices, one process each: nothing but gradients
            assert model_data == {"gradients"} and sent["gradients"] == STEPS * 2 * parameters, where
        else:  # one device, two processes: the hand-over and the gradient sum inside it, nothing across devices
            predicted = record["extra"]["predicted_comm_elements"]
            assert model_data == {"intra:gradients", "intra:state", "intra:state_grad"}, where
            assert sent["intra:state"] == predicted["intra:state"] > 0, where
            assert sent["intra:gradients"] == STEPS * 2 * parameters and table3["gradients_total"] == 0, where
        assert not {"to_vertex:forward", "to_time:forward", "halo:forward"} & set(sent), where


def test_group_sync_steps_after_each_group_batch_and_epoch_sync_keeps_one_step(runs, store):
    """§5.1: an optimiser step after every group batch changes the trajectory (not one step per epoch), and
    `single` taking the same steps is followed; ``--blad-sync epoch`` keeps the one flat all-reduce."""
    per_epoch = run_experiments([_config("single", "wdgcn", store, 1, group_batch=0)]) + \
        run_experiments([_config("blad", "wdgcn", store, 2, blad_sync="epoch", group_batch=0)])
    stepped = runs["p2"][("blad", (), "wdgcn")]
    assert not np.allclose(_losses(stepped), _losses(per_epoch[0]), rtol=1e-5)
    np.testing.assert_allclose(_losses(per_epoch[1]), _losses(per_epoch[0]), rtol=1e-5)
    assert _sent(per_epoch[1])["gradients"] == 2 * per_epoch[1]["extra"]["parameters"]  # every process, once
    assert per_epoch[1]["extra"]["blad"]["sync"] == {**per_epoch[1]["extra"]["blad"]["sync"], "mode": "epoch",
                                                     "optimiser_steps": 1}


def test_blad_splits_by_eq2_and_runs_the_exchanged_pairs(runs):
    for (scheme, options, model), record in runs["p2"].items():
        if not scheme.startswith("blad") or dict(options).get("procs_per_device") == 1:
            continue
        report = record["extra"]["blad"]
        where = f"{scheme} {model}"
        # §4 step 1: the first epoch ran on the proxy's plan, the second on the first epoch's measured durations
        assert report["devices"] == 1 and report["procs_per_device"] == 2
        assert report["durations"]["source"] == "profiled" and report["overhead_seconds"]["profiling"] > 0, where
        decided = report["pairs_exchanged_by_epoch"]
        assert len(decided) == BASE["epochs"] and decided[-1] == report["pairs_exchanged_by_layer"], where
        assert all(1 <= p <= 3 for p in report["p1_snapshots"]), where  # corrected Eq. 2: p_i in 1..L-1
        assert report["overhead_seconds"]["dp"] > 0
        if scheme == "blad":
            assert report["pairs_exchanged"] > 0, where
            assert report["exchanges_run"] == sum(n for epoch in decided for n in epoch.values()), where
            # Fig. 11: both GCN layers keep their (aggregate, update) pair, and Alg. 1 exchanges some of each
            by_layer = report["pairs_exchanged_by_layer"]
            assert report["first_layer"] == "pair" and report["operators"][0].startswith("aggregate(") or \
                model == "evolvegcn-o", where
            assert set(by_layer) == {"0", "1"} and by_layer["0"] > 0 and by_layer["1"] > 0, where
            assert report["exchanges_run_by_layer"] == {k: sum(epoch[k] for epoch in decided) for k in by_layer}, where
            # the exchanged orders compute what the model's own order computes, to float tolerance
            np.testing.assert_allclose(_losses(record), _losses(runs["p2"][("blad-nm", (), model)]), rtol=1e-5)
        else:
            assert report["pairs_exchanged"] == 0 and report["exchanges_run"] == 0, where


def test_first_epoch_profile_is_the_default_duration_source_and_proxy_stays_an_option(runs, store):
    """§4 step 1: without --costmodel the plan of epoch 2 on comes from each snapshot's timed forward and
    backward in epoch 1 (shared by one all-reduce so every rank plans alike); --durations proxy keeps the
    operation-count proxy for every epoch. Either way the split changes only who runs what, not the losses."""
    proxy = run_experiments([_config("blad", "wdgcn", store, 2, durations="proxy")])[0]
    profiled = runs["p2"][("blad", (), "wdgcn")]
    assert proxy["extra"]["blad"]["durations"]["source"] == "proxy"
    assert "profiling" not in proxy["extra"]["blad"]["overhead_seconds"] or \
        proxy["extra"]["blad"]["overhead_seconds"]["profiling"] == 0
    report = profiled["extra"]["blad"]
    assert report["durations"]["forward_seconds_total"] > 0 and report["durations"]["backward_seconds_total"] > 0
    assert _sent(profiled).get("blad:profile") is None  # the profile's all-reduce is epoch 1's, not the last's
    np.testing.assert_allclose(_losses(proxy), _losses(profiled), rtol=1e-5)


def test_snapshot_partitioning_of_groups_moves_the_esdg_volume_per_group(runs):
    """ESDG on groups (BLAD §7.1): each group's steps split by time interval, and every rank's local steps
    travel to the other rank's vertex rows for the temporal module (ESDG §4.2): per group of g steps at
    P = 2, g·N/2 rows of the LSTM's width (WD-GCN's hidden) each way. Table 3 writes 2·N·T·F for the
    hidden states that follow the time order; the harness's snapshot scheme re-distributes instead."""
    record = runs["p2"][("snapshot", (), "wdgcn")]
    nodes, hidden = 40, BASE["hidden"]
    group_lengths = [min(target + 1, BASE["group_length"]) for target in range(6)]  # 8 input steps, targets 0..5
    expected = sum(group_lengths) * nodes // 2 * hidden
    sent = _sent(record)
    assert sent["to_vertex:forward"] == sent["to_time:forward"] == sent["to_vertex:backward"] == expected


def _table3(kind: str, model: str, store: Path, ranks: int = 2) -> dict:
    """Table 3's row for ``kind`` on the test store at P = 2 (dgbench.trainers.discrete.blad.table3), from the model's
    parameters and widths and the store's groups: the inputs, not the schemes' own volume models."""
    from dgbench.registry import MODELS as REGISTERED
    from dgbench.trainers.discrete.blad.table3 import table3
    from dgbench.trainers.discrete.blad.runtime import parameter_split
    from dgbench.trainers.discrete.data import TRAIN, DiscreteData
    data = DiscreteData(store, seed=BASE["seed"], group_length=BASE["group_length"], smoothing="none")
    net = REGISTERED[f"discrete:{model}"].build(in_features=data.in_features, hidden=BASE["hidden"])
    split, groups = parameter_split(net), [data.group_of(s) for s in data.steps_of(TRAIN)]
    spatial = sum(sum(w) for w in net.spatial_widths() or [])
    halos = None
    if kind == "vertex":
        from dgbench.trainers.discrete.blad.table3 import halo_rows
        from dgbench.trainers.discrete.placement import partition_owner
        owner = partition_owner(data, 2, "range", data.seed).owner
        halos = [halo_rows(edges, owner) for edges in data.input_edge_lists()]
    return table3(kind, ranks=ranks, w_gnn=split["gnn"], w_rnn=split["rnn"], w_scorer=split["scorer"],
                  group_lengths=[len(g) for g in groups], n_vertex=data.num_nodes,
                  temporal_widths=net.feature_widths(), spatial_width=spatial, halo_rows_per_step=halos,
                  groups=groups).as_dict()


def test_measured_bytes_equal_table3_per_partition_kind(runs, store):
    """§5.3 Table 3 instantiated (module docstring of dgbench.trainers.discrete.blad.table3): every kind's gradients are
    p·(W_GNN + W_RNN + W_score); features: group none, snapshot 2·N·T·F summed over the groups (ESDG's
    re-distribution, each of its four tags a quarter), vertex T·N_khop·F per direction (1-hop halos
    counted here from the store's edges and the range partition)."""
    cases = {"group": [k for k in runs["p2"] if k[0].startswith("blad")],
             "snapshot": [("snapshot", (), "wdgcn")], "vertex": [("vertex", (("partition", "range"),), "evolvegcn-o")]}
    for kind, keys in cases.items():
        for key in keys:
            row, sent = _table3(kind, key[2], store), _sent(runs["p2"][key])
            where = f"{kind}: {key}"
            if kind == "group":  # Table 3's p = the devices in the all-reduce (one here: nothing crosses devices)
                devices = runs["p2"][key]["extra"]["blad"]["devices"]
                row = _table3(kind, key[2], store, ranks=devices)
                assert sent.get("gradients", 0) == STEPS * row["gradients"], where
            else:  # one flat all-reduce per optimiser step
                assert row["gradients"] > 0 and sent["gradients"] == STEPS * row["gradients"], where
            if kind == "group":
                assert row["features"] == 0 and not {t for t in sent if t.split(":")[0] in FEATURE_TAGS}, where
            elif kind == "snapshot":
                moved = sum(sent[f"{way}:{d}"] for way in ("to_vertex", "to_time") for d in ("forward", "backward"))
                assert row["features"] > 0 and moved == row["features"], where
            else:
                assert row["features"] > 0 and sent["halo:forward"] == sent["halo:backward"] == row["features"], where


@pytest.mark.slow
def test_four_ranks_follow_single_two_devices_or_four(runs, store):
    """P = 4: two devices of two processes (blad, blad-nm) and four devices of one, for the three models.
    Slow: the registry-driven conformance suite already trains these at P = 4 in the default run."""
    cases = [("blad", {}), ("blad-nm", {}), ("blad", {"procs_per_device": 1})]
    keys = [(scheme, options, model) for scheme, options in cases for model in MODELS]
    records = run_experiments([_config(s, m, store, 4, **o) for s, o, m in keys])
    for (scheme, options, model), record in zip(keys, records):
        where = f"{scheme} {options} {model} P=4"
        np.testing.assert_allclose(_losses(record), _losses(runs["single"][model]), rtol=1e-5, err_msg=where)
        report, sent = record["extra"]["blad"], _sent(record)
        assert sent.get("gradients", 0) == STEPS * report["table3"]["gradients_total"], where
        assert report["table3"]["ranks"] == report["devices"], where
        for tag, elements in record["extra"]["predicted_comm_elements"].items():
            assert sent.get(tag, 0) == elements, f"{where}: {tag}"
        procs = options.get("procs_per_device", 2)
        assert (report["devices"], report["procs_per_device"]) == (4 // procs, procs), where
        if scheme == "blad" and procs == 2:
            decided = report["pairs_exchanged_by_epoch"]  # epoch 1 on the proxy's plan, then on the profile's
            assert report["pairs_exchanged"] > 0 and report["exchanges_run"] == sum(
                n for epoch in decided for n in epoch.values()), where


def test_refusals_are_one_line(store):
    with pytest.raises(DgbenchError, match="trains snapshot groups"):
        resolve(RunConfig("blad", "wdgcn", store, nproc=2, group_length=0))
    with pytest.raises(DgbenchError, match="not a multiple"):
        resolve(RunConfig("blad", "wdgcn", store, nproc=3, procs_per_device=2))
    with pytest.raises(DgbenchError, match="runs each group whole"):
        resolve(RunConfig("snapshot", "wdgcn", store, nproc=2, group_length=3, blocks=2))
    with pytest.raises(DgbenchError, match="need the group protocol"):
        resolve(RunConfig("single", "wdgcn", store, nproc=1, group_batch=2))
    with pytest.raises(DgbenchError, match="--blad-sync epoch steps once per epoch"):
        run_experiments([_config("blad", "wdgcn", store, 1, blad_sync="epoch")])
    for scheme in ("blad", "blad-nm"):  # BLAD's groups have no V_t mask: a presence would be silently ignored
        with pytest.raises(DgbenchError, match="trains every vertex of every snapshot"):
            resolve(RunConfig(scheme, "tgcn", store, nproc=2, presence="edges"))
    run = resolve(RunConfig("blad", "evolvegcn-o", store, nproc=2))
    assert run.task.group_length == 4 and run.task.smoothing == "none" and run.task.group_batch == 2  # defaults


@pytest.mark.slow  # 16-23 s (profiling + two launches); the predictor's own tests run by default
def test_a_fitted_predictor_drives_the_split_and_is_refused_for_another_width(store, tmp_path):
    from dgbench.trainers.discrete.blad.predictor import fit_predictor, grid_loads, profile_operators, save_predictor
    samples = profile_operators(grid_loads([40, 160], [2, 6]), [2, 6], 6, ["aggregate", "update", "lstm"], repeats=1)
    path = save_predictor(tmp_path / "blad.json", *fit_predictor(samples, 6))
    record = run_experiments([_config("blad", "wdgcn", store, 1, costmodel=path)])[0]  # one rank: whole groups
    assert record["extra"]["blad"]["durations"]["source"] == "fitted"
    np.testing.assert_allclose(_losses(record), _losses(run_experiments([_config("single", "wdgcn", store, 1)])[0]),
                               rtol=1e-6)
    with pytest.raises(DgbenchError, match="fitted with hidden width 6"):
        run_experiments([RunConfig("blad", "wdgcn", store, nproc=1, epochs=1, hidden=4, costmodel=path,
                                   out=tmp_path / "runs")])
