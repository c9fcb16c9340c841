"""Hardware profiles for the projection: a device's compute rates and the network as alpha-beta links.

A small JSON document (``dgbench.hardware``) from one of two sources, always said: ``calibrated``
(``dgbench project calibrate``, carrying this machine's identity) or ``spec-sheet``
(``trainers/projection/profiles/*.json``, rates roofline-scaled from a calibrated profile).
See docs/projection.md (section "2. Hardware profiles").
"""
from __future__ import annotations

import json
from importlib import resources
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgbench.errors import DgbenchError
from dgbench.trainers.projection.collectives import Link, Network

SCHEMA, VERSION = "dgbench.hardware", 1
PROFILE_KIND = "hardware-profile"  # dgbench.costmodel kind of calibrated profiles
BUILTIN = resources.files(__package__) / "profiles"  # package data (pyproject.toml)
RATE_KEYS = {"discrete": ("per_edge_s", "per_cell_s", "per_step_s"),
             "continuous": ("per_event_s", "per_position_s", "per_batch_s")}
# measured on a scheme's own runs when calibrated (a profile without them prices that term as zero)
OPTIONAL_RATE_KEYS = {"continuous": ("per_microbatch_s",)}
OVERHEAD_KEYS = ("per_call_s",)  # a scheme's P = 2 overhead (calibrated profiles only)
SCALED_KEYS = {"per_edge_s", "per_cell_s", "per_event_s", "per_position_s"}  # memory-bound work


@dataclass
class HardwareProfile:
    """A profile document (see the module docstring) with its network read out."""

    document: dict[str, Any]
    path: str = ""
    hardware: dict[str, Any] = field(default_factory=dict)  # identity of a calibrated profile's machine

    @property
    def name(self) -> str:
        return str(self.document["name"])

    @property
    def source(self) -> str:
        return str(self.document["source"])

    @property
    def network(self) -> Network:
        links = self.document["links"]
        return Network(Link(float(links["intra"]["alpha_s"]), float(links["intra"]["bandwidth"]),
                            links["intra"].get("what", "")),
                       Link(float(links["inter"]["alpha_s"]), float(links["inter"]["bandwidth"]),
                            links["inter"].get("what", "")),
                       int(self.document["ranks_per_node"]))

    @property
    def memory_bandwidth(self) -> float:
        return float(self.document["device"]["memory_bandwidth"])

    def rates(self, family: str, model: str, basis: "HardwareProfile | None" = None,
              scale_overheads: bool = False) -> tuple[dict[str, float], str]:
        """Compute rates of ``model`` and how they were obtained: this profile's fit, or a calibrated
        ``basis`` scaled by the memory-bandwidth ratio (spec-sheet profiles). ``scale_overheads``: scale
        the per-step / per-batch overheads too (an ideal device with no fixed costs per kernel launch or
        host step; the default keeps the calibrated machine's, a pessimistic bound)."""
        own = self.document.get("compute", {}).get(family, {}).get(model)
        if own:
            optional = {k: float(own[k]) for k in OPTIONAL_RATE_KEYS.get(family, ()) if k in own}
            return {**{k: float(own[k]) for k in RATE_KEYS[family]}, **optional}, f"{self.source} ({self.name})"
        if basis is None:
            raise DgbenchError(f"hardware profile '{self.name}' has no {family} rates for model '{model}'; give a "
                               f"calibrated profile to scale from (--compute-from, made by `dgbench project "
                               f"calibrate`)")
        base, how = basis.rates(family, model)
        ratio = basis.memory_bandwidth / self.memory_bandwidth
        scaled = {k: v * ratio if k in SCALED_KEYS or scale_overheads else v for k, v in base.items()}
        return scaled, (f"{how} x memory bandwidth {basis.memory_bandwidth / 1e9:.3g} / "
                        f"{self.memory_bandwidth / 1e9:.3g} GB/s (roofline scaling; overheads "
                        f"{'scaled too' if scale_overheads else 'unscaled'})")

    def scheme_overhead(self, family: str, scheme: str, model: str) -> dict[str, float] | None:
        """``per_call_s`` of ``scheme``'s ranks beyond the rates and the link, calibrated at
        P = 2 on this profile's machine (dgbench.trainers.projection.projection); None where not calibrated."""
        own = self.document.get("scheme_overheads", {}).get(family, {}).get(scheme, {}).get(model)
        return {k: float(own[k]) for k in OVERHEAD_KEYS} if own else None

    def describe(self) -> dict[str, Any]:
        """What a projection cites of its profile."""
        out = {k: self.document[k] for k in ("name", "source", "description", "ranks_per_node", "device", "links")
               if k in self.document}
        out["path"] = self.path
        if self.hardware:
            out["hardware"] = self.hardware
        return out


def builtin_profiles() -> list[str]:
    return sorted(p.name.removesuffix(".json") for p in BUILTIN.iterdir() if p.name.endswith(".json"))


def _check(document: Any, where: str) -> dict[str, Any]:
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise DgbenchError(f"{where}: not a dgbench hardware profile (schema {SCHEMA!r})")
    if document.get("version") != VERSION:
        raise DgbenchError(f"{where}: hardware profile version {document.get('version')!r}, this dgbench reads "
                           f"{VERSION}")
    for key in ("name", "source", "ranks_per_node", "device", "links"):
        if key not in document:
            raise DgbenchError(f"{where}: hardware profile without '{key}'")
    for kind in ("intra", "inter"):
        link = document["links"].get(kind)
        if not isinstance(link, dict) or not {"alpha_s", "bandwidth"} <= set(link):
            raise DgbenchError(f"{where}: link '{kind}' needs alpha_s and bandwidth")
        if float(link["bandwidth"]) <= 0 or float(link["alpha_s"]) < 0:
            raise DgbenchError(f"{where}: link '{kind}' has a non-positive bandwidth or a negative latency")
    if int(document["ranks_per_node"]) < 1:
        raise DgbenchError(f"{where}: ranks_per_node must be >= 1")
    return document


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A built-in spec-sheet profile by name, or a profile file (plain, or calibrated with its identity)."""
    path = Path(name_or_path)
    builtin = BUILTIN / f"{name_or_path}.json"
    if not path.exists() and builtin.is_file():
        path = Path(str(builtin))  # installed packages are folders: the resource is a file
    if not path.exists():
        raise DgbenchError(f"{name_or_path}: no such hardware profile (built in: {', '.join(builtin_profiles())})")
    try:
        document = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DgbenchError(f"{path}: not JSON ({exc})") from exc
    if isinstance(document, dict) and document.get("schema") == "dgbench.costmodel":
        from dgbench.costmodel import load_fitted
        fitted = load_fitted(path, PROFILE_KIND, allow_other_hardware=True)  # a profile describes its machine
        return HardwareProfile(_check(fitted.payload, str(path)), str(path), fitted.hardware)
    return HardwareProfile(_check(document, str(path)), str(path))


def save_calibrated(path: str | Path, document: dict[str, Any], fit: dict[str, Any]) -> Path:
    """A calibrated profile, written with the hardware identity (dgbench.costmodel)."""
    from dgbench.costmodel import save_fitted
    return save_fitted(path, PROFILE_KIND, _check(document, str(path)), fit)
