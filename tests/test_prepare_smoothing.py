"""`prepare ... --m-product W / --edge-life L` writes the smoothed store, same as prepare + transform."""
from __future__ import annotations

from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.store import open_store
from dgbench.store.validate import validate_store
from dgbench.loaders.prepare import build_file
from dgbench.loaders.smoothing import edge_life, m_product


def _events_file(tmp_path):
    raw = tmp_path / "toy.edges"
    rows = [(u % 7, (u * 3 + 1) % 7, 1, 1000 + 40_000 * (u // 4)) for u in range(40)]
    raw.write_text("% sym unweighted\n" + "".join(f"{u} {v} {w} {t}\n" for u, v, w, t in rows))
    return raw


def test_prepare_with_smoothing_equals_prepare_then_transform(tmp_path):
    raw = _events_file(tmp_path)
    plain = build_file(out=tmp_path / "plain.zarr", fmt="network-repository", raw=raw, to="snapshots")
    for option, transform, size in (("m_product", m_product, 3), ("edge_life", edge_life, 2)):
        direct = build_file(out=tmp_path / f"{option}.zarr", fmt="network-repository", raw=raw, to="snapshots",
                            **{option: size})
        reference = transform(plain, tmp_path / f"ref-{option}.zarr", size)
        assert validate_store(direct) == []
        assert open_store(direct).fingerprint == open_store(reference).fingerprint
        assert open_store(direct).provenance["transforms"][-1]["name"] == option.replace("_", "-")
    leftovers = [p.name for p in tmp_path.iterdir() if "unsmoothed" in p.name]
    assert leftovers == []


def test_smoothing_a_stream_is_one_clear_error(tmp_path):
    raw = _events_file(tmp_path)
    result = CliRunner().invoke(cli, ["prepare", "file", "--format", "network-repository", "--raw", str(raw),
                                      "--to", "stream", "--m-product", "3", "-o", str(tmp_path / "s.zarr")])
    assert result.exit_code == 1
    assert "--to snapshots" in result.output
    assert not (tmp_path / "s.zarr").exists()
