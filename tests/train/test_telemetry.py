"""The telemetry sampler: the CPU path for real, the NVML path against a stand-in for the GPU driver."""

import sys
import time
import types

import torch

from cramming.train import telemetry
from cramming.train.telemetry import TelemetrySampler


def test_without_a_gpu_it_samples_this_process():
    sampler = TelemetrySampler(torch.device("cpu"), interval=0.02).start()
    wall, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() < wall + 0.3:  # keep a core busy
        sum(i * i for i in range(10_000))
    figures = sampler.read()
    got_percent = 100 * (time.process_time() - cpu) / (time.perf_counter() - wall)  # of a core; less when busy
    sampler.stop()
    assert not sampler.thread.is_alive()
    assert set(figures) == {"cpu_util", "rss_gb"}  # no GPU figures, no energy
    assert figures["cpu_util"] > got_percent / 3 > 0 and 0.01 < figures["rss_gb"] < 64
    assert sampler.energy_wh() is None
    assert set(sampler.read()) == {"cpu_util", "rss_gb"}  # nothing new since the last read: a fresh sample


def fake_nvml(energy_mj: list[int]):
    """A stand-in for pynvml: one card at 250 W, 40 GiB used, 70 °C, utilization 90 then 100 %."""
    utilization = iter([90, 100, 100, 100])
    error = type("NVMLError", (Exception,), {})
    return types.SimpleNamespace(
        NVMLError=error,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda uuid: "card",
        nvmlDeviceGetTotalEnergyConsumption=lambda handle: energy_mj.pop(0),
        nvmlDeviceGetUtilizationRates=lambda handle: types.SimpleNamespace(gpu=next(utilization)),
        nvmlDeviceGetMemoryInfo=lambda handle: types.SimpleNamespace(used=40 * 2**30),
        nvmlDeviceGetTemperature=lambda handle, sensor: 70,
        nvmlDeviceGetPowerUsage=lambda handle: 250_000,
    )


def test_on_a_gpu_it_reads_nvml_and_converts_units(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([5_000, 5_000 + 3_600_000]))  # 1 Wh later
    monkeypatch.setattr(telemetry.torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(uuid="1234"))
    sampler = TelemetrySampler(torch.device("cuda", 0), interval=60)  # samples taken by hand below
    sampler.take_sample()
    sampler.take_sample()
    assert sampler.read() == {"gpu_util": 95.0, "gpu_power_w": 250.0, "gpu_mem_gb": 40.0, "gpu_temp_c": 70.0,
                              "energy_wh": 1.0}
