"""The one experiment driver of both families: resolve, start the ranks, build, train, merge, record.

A run is resolved first (:func:`resolve`): the store's kind picks the family, the registry gives the
scheme and the model, and every given option is handed to the owner that takes it (the run's family
protocol, its scheme, its model) or refused by one rule (:mod:`dgbench.options`). Then one launch
starts the ranks for one or several runs (process start-up dominates small runs), each rank runs the
family's :meth:`Family.train_rank` per run, and the family turns the per-rank results into the record.

The families (:mod:`dgbench.trainers.discrete.family`, :mod:`dgbench.trainers.continuous.family`) supply the hooks; the
driver never knows which scheme is on.
"""
from __future__ import annotations

import importlib
import os
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import torch

from dgbench import progress
from dgbench.dist import DistContext, share_from_main
from dgbench.errors import DgbenchError
from dgbench.launch import launch, preload_for_ranks, spawns_ranks
from dgbench.memory import return_freed_memory
from dgbench.options import Options, as_hyperparameters, build_options, check_value, refuse_foreign, specs
from dgbench.registry import MODELS, SCHEMES, ModelEntry, load_plugins, model_of
from dgbench.store import SNAPSHOTS, STREAM, read_attrs
from dgbench.trainers.config import RunConfig
from dgbench.trainers.contract import Family, Partition, Scheme, scheme_of

FAMILY_OF_KIND: dict[str, Family] = {SNAPSHOTS: "discrete", STREAM: "continuous"}
FAMILY_MODULES: dict[Family, str] = {"discrete": "dgbench.trainers.discrete.family",
                                     "continuous": "dgbench.trainers.continuous.family"}
preload_for_ranks(__name__, *FAMILY_MODULES.values())  # what train_runs' ranks import: once, in the fork server
STORE_KIND_WORDS = {SNAPSHOTS: "a snapshot store", STREAM: "an edge-stream store"}
T = TypeVar("T")
EVALUATION_INPUT = "evaluation"  # the run's evaluation sets in ResolvedRun.inputs (both families' key)


@dataclass
class ResolvedRun:
    """A run with its owners and their resolved options."""

    config: RunConfig
    family: Family
    scheme: Scheme
    scheme_options: Options
    model: ModelEntry
    model_options: Options
    task: Options  # the family protocol's options
    fingerprint: str | None = None  # of the store when the run was resolved: every rank must train on it
    # what this process built for the run (store, stream, model probe, evaluation sets): each once per
    # process, never sent to the ranks (they build their own)
    inputs: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def once(self, key: str, build: Callable[[], T]) -> T:
        """The run's input ``key`` of this process, built by ``build`` the first time it is asked for."""
        if key not in self.inputs:
            self.inputs[key] = build()
        return self.inputs[key]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "inputs": {}}

    def keep_only_what_the_record_cites(self) -> None:
        """Drop what this process built for the run but its ranks build for themselves (the ranks start in
        fresh processes): the evaluation sets keep their citations, not their arrays; anything else the
        record asks for again is built again then, after the ranks are done."""
        sets = self.inputs.get(EVALUATION_INPUT)
        self.inputs.clear()
        if sets is not None:
            self.inputs[EVALUATION_INPUT] = [s.without_arrays() for s in sets]

    def hyperparameters(self) -> dict[str, Any]:
        """Exactly the options that applied: the run's, the protocol's, the scheme's and the model's."""
        return as_hyperparameters(self.config, self.task, self.scheme_options, self.model_options)


class FamilyHooks(Protocol):
    """What a family gives the driver (module-level functions of its ``family`` module)."""

    TaskOptions: type[Options]

    def check(self, run: ResolvedRun) -> None: ...

    def partition_problem(self, run: ResolvedRun) -> Any: ...

    def train_rank(self, ctx: DistContext, run: ResolvedRun, partition: Partition, problem: Any) -> dict[str, Any]:
        ...

    def record(self, run: ResolvedRun, per_rank: list[dict[str, Any]], started: str) -> dict[str, Any]: ...


def family_hooks(family: Family) -> FamilyHooks:
    try:
        module = importlib.import_module(FAMILY_MODULES[family])
    except ModuleNotFoundError as exc:
        raise DgbenchError(f"the {family}-time trainers are not available ({exc})") from exc
    return module  # type: ignore[return-value]  # a module satisfying the protocol


def _kind_of(config: RunConfig) -> str:
    return str(read_attrs(config.dataset)["kind"])


def _fingerprint_of(config: RunConfig) -> str | None:
    value = read_attrs(config.dataset).get("fingerprint")
    return str(value) if value is not None else None


def _wrong_kind(config: RunConfig, kind: str, family: Family) -> str | None:
    """When the scheme or model belongs to the other family: say what the store is and what to do."""
    other: Family = "continuous" if family == "discrete" else "discrete"
    words = STORE_KIND_WORDS.get(kind, f"a '{kind}' store")
    for what, table, name in (("scheme", SCHEMES, config.scheme), ("model", MODELS, config.model)):
        if f"{family}:{name}" in table or f"{other}:{name}" not in table:
            continue
        hint = (f"cut it into snapshots with `dgbench convert {config.dataset} --window ... -o OUT`"
                if family == "continuous" else "train a discrete-time scheme and model on it, or prepare an "
                                               "edge-stream store")
        known = sorted(e.name for key, e in table.items() if key.startswith(f"{family}:"))
        return (f"{config.dataset} is {words}; '{name}' is a {other}-time {what} "
                f"({family}-time {what}s: {', '.join(known)}); {hint}")
    return None


def resolve(config: RunConfig) -> ResolvedRun:
    """The run's family, scheme, model and options; one-line errors for anything that would not run."""
    load_plugins()
    kind = _kind_of(config)
    family = FAMILY_OF_KIND.get(kind)
    if family is None:
        raise DgbenchError(f"{config.dataset}: no trainer family for stores of kind '{kind}'")
    hooks = family_hooks(family)
    problem = _wrong_kind(config, kind, family)
    if problem:
        raise DgbenchError(problem)
    scheme = scheme_of(family, config.scheme)
    model = model_of(family, config.model)
    if scheme.models is not None and model.name not in scheme.models:
        raise DgbenchError(f"scheme '{scheme.name}' trains {', '.join(scheme.models)}, not '{model.name}'")
    _check_run_level(config)
    refuse_foreign(config.options, (hooks.TaskOptions, scheme.Options, model.options),
                   f"the {family}-time protocol, scheme '{scheme.name}' or model '{model.name}'",
                   lambda name: _takers(family, name))
    run = ResolvedRun(config, family, scheme,
                      build_options(scheme.Options, config.options, f"scheme '{scheme.name}'"),
                      model, build_options(model.options, config.options, f"model '{model.name}'"),
                      build_options(hooks.TaskOptions, _with_protocol_defaults(scheme, config.options),
                                    f"the {family}-time protocol"),
                      _fingerprint_of(config))
    world = int(os.environ.get("WORLD_SIZE", config.nproc))
    scheme.check_world(world)
    scheme.validate(run.scheme_options, world)
    hooks.check(run)
    return run


def trains(run: ResolvedRun) -> bool:
    """Whether the run trains (a baseline's factory returns a Baseline: it scores without training, so its
    epochs process no work and it fits the accuracy track only)."""
    from dgbench.tasks.baselines import Baseline
    returned = typing.get_type_hints(run.model.factory).get("return")
    return not (isinstance(returned, type) and issubclass(returned, Baseline))


def _with_protocol_defaults(scheme: Scheme, given: dict[str, Any]) -> dict[str, Any]:
    """The given options over the scheme's protocol defaults (what the scheme runs under unless told)."""
    return {**scheme.protocol_defaults, **{name: value for name, value in given.items() if value is not None}}


def _check_run_level(config: RunConfig) -> None:
    """Bounds of the run-level options (the CLI checks types; the Python API does not)."""
    for spec in specs(RunConfig):
        check_value("the run", spec, getattr(config, spec.name))
    config.resolved_backend()  # --device cuda needs CUDA
    from dgbench.records import read_system_description
    read_system_description(config.system_desc)  # a bad --system-desc fails before anything is written


def _takers(family: Family, name: str) -> list[str]:
    """Who in ``family`` takes option ``name`` (for the refusal message)."""
    out = [f"scheme '{s.name}'" for s in SCHEMES.values() if s.family == family  # type: ignore[attr-defined]
           and any(spec.name == name for spec in specs(s.Options))]  # type: ignore[attr-defined]
    out += [f"model '{m.name}'" for m in MODELS.values() if m.family == family
            and any(spec.name == name for spec in specs(m.options))]
    other: Family = "continuous" if family == "discrete" else "discrete"
    if any(spec.name == name for spec in specs(family_hooks(other).TaskOptions)):
        out.append(f"the {other}-time protocol")
    return out


# --------------------------------------------------------------------------- ranks

def _partition_once(ctx: DistContext, run: ResolvedRun, problem: Any, index: int) -> Partition:
    """Rank 0 partitions; every rank gets the result through the store as plain data, never a pickle
    (dgbench.dist.share_from_main)."""
    def compute() -> dict[str, Any]:
        return vars(run.scheme.partition(problem, ctx.world_size, run.scheme_options))
    return Partition(**share_from_main(ctx, f"partition-{index}-{run.scheme.name}", compute))


def train_runs(ctx: DistContext, runs: list[ResolvedRun], quiet: bool | None = None) -> list[dict[str, Any]]:
    """Everything one rank does for several runs in one launch (module level so spawned ranks can run it).
    ``quiet``: the launching process's --quiet, for ranks started in fresh processes."""
    if quiet is not None:
        progress.set_quiet(quiet)
    results = []
    before = torch.get_num_threads()
    try:
        for index, run in enumerate(runs):
            if run.config.threads:  # else the launcher's cores // ranks (dgbench.timing.default_threads), or the
                torch.set_num_threads(run.config.threads)  # caller's own count in a world of one run in-process
            hooks = family_hooks(run.family)
            problem = hooks.partition_problem(run)
            partition = _partition_once(ctx, run, problem, index)
            results.append(hooks.train_rank(ctx, run, partition, problem))
    finally:
        torch.set_num_threads(before)  # a world of one runs in the caller's process
    return results


def run_experiments(configs: list[RunConfig]) -> list[dict[str, Any]]:
    """Records of several runs sharing nproc / backend / device / timeout, trained in one launch."""
    if len({(c.nproc, c.backend, c.device, c.timeout_s) for c in configs}) > 1:
        raise DgbenchError("runs launched together need the same nproc, backend, device and timeout")
    runs = [resolve(config) for config in configs]
    from dgbench.records import code_provenance, read_system_description, utc_now
    descriptions = [read_system_description(config.system_desc) for config in configs]  # checked by resolve
    code = code_provenance()  # the code as the ranks start: a commit made while they train is not what ran
    started = utc_now()
    head = configs[0]
    if not progress.is_quiet():
        print(f"starting {head.nproc} rank{'s' if head.nproc > 1 else ''} (process start-up, reading the store)...",
              file=sys.stderr, flush=True)
    if spawns_ranks(head.nproc):  # the launcher trains nothing: it keeps what the records cite, no data
        for run in runs:
            run.keep_only_what_the_record_cites()
        return_freed_memory()  # what building the evaluation sets and checking the runs freed
    per_rank = launch(train_runs, nproc=head.nproc, args=(runs, progress.is_quiet()),
                      backend=head.resolved_backend(), timeout_s=head.timeout_s)
    records = [family_hooks(run.family).record(run, [results[i] for results in per_rank], started)
               for i, run in enumerate(runs)]
    for record, description in zip(records, descriptions):
        record["code"] = dict(code)
        if description is not None:
            record["system"]["description"] = description
    return records


def run_experiment(config: RunConfig) -> dict[str, Any]:
    """Train ``config.model`` with ``config.scheme`` on ``config.dataset``; the result record."""
    return run_experiments([config])[0]
