"""benchmarks/privacy/noise_samplers.py: the discrete Laplace sampler comparison runs and its
goodness-of-fit test separates the right scale from a wrong one."""

import importlib
import json

import numpy as np
import torch

from dp_proto.privacy.noise import discrete_gaussian_noise, discrete_laplace_noise


def test_noise_sampler_benchmark_prints_its_keys(tmp_path, capsys):
    bench = importlib.import_module("benchmarks.privacy.noise_samplers")
    out = tmp_path / "noise.json"
    assert bench.main(["--n", "20000", "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["benchmark"] == "noise_samplers" and "speed_ratio_opendp_over_dp_proto" in payload
    assert "speed_ratio_opendp_over_dp_proto_gaussian" in payload
    for name in ("dp_proto", "dp_proto_gaussian"):
        row = payload["results"][name]
        assert set(row) == {"n", "seconds", "ns_per_draw", "pvalue"}
        assert all(p > 1e-4 for p in row["pvalue"].values())
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["benchmark"] == "noise_samplers"


def test_pmf_test_rejects_a_wrong_scale():
    bench = importlib.import_module("benchmarks.privacy.noise_samplers")
    noise = discrete_laplace_noise(50_000, 10.0, generator=torch.Generator().manual_seed(0)).numpy()
    assert bench.pmf_pvalue(noise, 10.0) > 1e-4
    assert bench.pmf_pvalue(noise, 12.0) < 1e-6
    assert bench.pmf_pvalue(np.round(noise * 0.8), 10.0) < 1e-6


def test_gaussian_pmf_test_rejects_a_wrong_sigma():
    bench = importlib.import_module("benchmarks.privacy.noise_samplers")
    gen = torch.Generator().manual_seed(0)  # seeded: a goodness-of-fit test on fresh entropy is flaky
    noise = discrete_gaussian_noise(50_000, 4.0, generator=gen).numpy()
    assert bench.gaussian_pmf_pvalue(noise, 4.0) > 1e-4
    assert bench.gaussian_pmf_pvalue(noise, 4.4) < 1e-6
    same_variance = discrete_laplace_noise(50_000, 2.83, generator=gen).numpy()
    assert bench.gaussian_pmf_pvalue(same_variance, 4.0) < 1e-6
