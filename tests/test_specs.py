from pathlib import Path

import pytest
import yaml

import gpumodel as gm
from gpumodel.speccheck import check_spec
from gpumodel.specs import load_spec_file, spec_json_schema

SPECS = sorted((Path(__file__).parent.parent / "specs").glob("*.yaml"))
REQUIRED = ["v100-sxm2-32gb", "t4", "a10g", "a100-sxm4-80gb", "a100-pcie-40gb", "l4", "l40s",
            "rtx-4090", "h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "b200", "mi300x"]  # fmt: skip


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_shipped_spec_validates_and_looks_dense(path):
    spec = load_spec_file(path)
    assert spec.id == path.stem
    assert check_spec(spec) == [] or spec.id == "rtx-4090"  # 4090: fp16 stored w/ fp32 accumulate


def test_library_has_required_gpus_and_aliases():
    ids = {g.id for g in gm.list_gpus()}
    assert set(REQUIRED) <= ids
    assert gm.get_gpu("h100").id == "h100-sxm"
    assert gm.get_gpu("A100").id == "a100-sxm4-80gb"
    assert gm.get_gpu("h200").id == "h200-sxm"


def test_datasheet_values_parsed_to_si():
    h100 = gm.get_gpu("h100-sxm")
    assert h100.memory_bandwidth_bytes_per_s == 3.35e12  # datasheet, not 3072 GB/s
    assert h100.peak_flops("bf16", "tensor") == pytest.approx(989.4e12)  # dense, not 1979
    assert h100.interconnect.nvlink.bandwidth_bytes_per_s == 900e9  # both directions
    assert h100.interconnect.nvlink.per_direction_bytes_per_s == 450e9
    a100 = gm.get_gpu("a100")
    assert a100.peak_flops("fp16", "tensor") == 312e12
    assert a100.peak_flops("fp16", "vector") == 78e12
    assert gm.get_gpu("h100-pcie").memory.type == "HBM2e"


def test_h100_bf16_ridge_point():
    h100 = gm.get_gpu("h100")
    # 989.4 TFLOP/s / 3.35 TB/s = 295.3 FLOP/B
    assert h100.peak_flops("bf16", "tensor") / h100.memory_bandwidth_bytes_per_s == pytest.approx(
        295.3, abs=0.1
    )


def test_unknown_gpu_names_close_matches():
    with pytest.raises(gm.UnknownGPUError, match=r"unknown GPU 'h1000'; did you mean h100"):
        gm.get_gpu("h1000")


def _write(tmp_path, data, name="x.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_wrong_dimension_names_file_field_and_unit(tmp_path):
    data = yaml.safe_load((Path(__file__).parent.parent / "specs" / "h100-sxm.yaml").read_text())
    data["memory"]["bandwidth"] = "3.35 TB"
    path = _write(tmp_path, data)
    with pytest.raises(gm.SpecError) as err:
        load_spec_file(path)
    msg = str(err.value)
    assert str(path) in msg and "memory.bandwidth" in msg and "expected a bandwidth" in msg


def test_typo_key_is_an_error(tmp_path):
    data = yaml.safe_load((Path(__file__).parent.parent / "specs" / "h100-sxm.yaml").read_text())
    data["memroy"] = data.pop("memory")
    with pytest.raises(gm.SpecError, match="memroy: unknown key"):
        load_spec_file(_write(tmp_path, data))


def test_unsourced_field_is_an_error(tmp_path):
    data = yaml.safe_load((Path(__file__).parent.parent / "specs" / "h100-sxm.yaml").read_text())
    for s in data["sources"]:
        s["fields"] = [f for f in s["fields"] if f != "tdp"]
    with pytest.raises(gm.SpecError, match="no source covers tdp"):
        load_spec_file(_write(tmp_path, data))


def test_user_spec_dir_overrides_shipped(tmp_path, monkeypatch):
    data = yaml.safe_load((Path(__file__).parent.parent / "specs" / "h100-sxm.yaml").read_text())
    data["memory"]["bandwidth"] = "3 TB/s"
    path = _write(tmp_path, data, "h100-sxm.yaml")
    spec = gm.get_gpu("h100", specs_dirs=[tmp_path])
    assert spec.memory_bandwidth_bytes_per_s == 3e12
    assert spec.origin == str(path)
    monkeypatch.setenv("GPUMODEL_SPECS_PATH", str(tmp_path))
    assert gm.get_gpu("h100").memory_bandwidth_bytes_per_s == 3e12


def test_a_copy_that_kept_the_shipped_aliases_does_not_take_them(tmp_path):
    """Overriding is by id: a user's copy of the H100 file renamed my-h100 but still listing
    the aliases h100, h100-sxm5 leaves --gpu h100 the shipped H100 (it turned into the copy),
    and specs check says why."""
    data = yaml.safe_load((Path(__file__).parent.parent / "specs" / "h100-sxm.yaml").read_text())
    data["id"] = "my-h100"
    data["memory"]["bandwidth"] = "3 TB/s"
    path = _write(tmp_path, data, "my-h100.yaml")
    assert gm.get_gpu("h100", specs_dirs=[tmp_path]).id == "h100-sxm"
    assert gm.get_gpu("my-h100", specs_dirs=[tmp_path]).memory_bandwidth_bytes_per_s == 3e12
    warnings = check_spec(load_spec_file(path))
    assert any("alias 'h100' is already h100-sxm's" in w for w in warnings)
    assert not any("alias" in w for w in check_spec(gm.get_gpu("h100")))


def test_sparse_rate_is_flagged():
    h100 = gm.get_gpu("h100")
    sparse = h100.model_copy(
        update={
            "peak": h100.peak.model_copy(
                update={
                    "tensor": h100.peak.tensor.model_copy(update={"fp16": 1979e12, "bf16": 1979e12})
                }
            )
        }
    )
    warnings = check_spec(sparse)
    assert any("sparse" in w and "fp16" in w for w in warnings)


def test_schema_is_json_schema():
    schema = spec_json_schema()
    assert "memory" in schema["properties"] and "bandwidth" in str(schema)
