"""`--device` / `--backend` mean the same for both trainer families (RunConfig.resolved_backend)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.errors import DgbenchError
from dgbench.trainers.config import RunConfig

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised where CUDA is absent")


def test_device_cpu_means_gloo_and_an_explicit_backend_wins():
    assert RunConfig("single", "tmgcn", Path("x"), device="cpu").resolved_backend() == "gloo"
    assert RunConfig("single", "tmgcn", Path("x"), device="cpu", backend="nccl").resolved_backend() == "nccl"
    assert RunConfig("single", "tmgcn", Path("x")).resolved_backend() is None


@no_cuda
def test_device_cuda_without_cuda_is_an_error():
    with pytest.raises(DgbenchError, match="no CUDA device"):
        RunConfig("single", "tmgcn", Path("x"), device="cuda").resolved_backend()


@no_cuda
@pytest.mark.parametrize("family", ["discrete", "continuous"])
def test_both_families_refuse_device_cuda_without_cuda(family, esdg_store, stream_store, tmp_path):
    store, model = (esdg_store, "tmgcn") if family == "discrete" else (stream_store, "jodie")
    result = CliRunner().invoke(cli, ["run", "--scheme", "single", "--model", model, "--dataset", str(store),
                                      "--device", "cuda", "--epochs", "1", "--out", str(tmp_path / "runs")])
    assert result.exit_code == 1
    assert "--device cuda: no CUDA device" in result.output
    assert not (tmp_path / "runs").exists()
