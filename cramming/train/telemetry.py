"""Hardware telemetry sampled by a background thread, so the training step never waits for it.

On CUDA: GPU utilization, memory used, temperature, power draw and energy, read from NVML. On the CPU:
this process's CPU utilization and resident memory (psutil). `read()` summarizes the samples taken
since the previous call, for one metrics record.
"""

import logging
import threading

import psutil
import torch

log = logging.getLogger("pretrain")


class _NvmlDevice:
    """One GPU through NVML; energy from the card's own counter where it has one (Volta and later)."""

    def __init__(self, device: torch.device):
        import pynvml  # noqa: PLC0415 -- a test puts a stand-in in sys.modules

        self.nvml = pynvml
        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(device).uuid)  # the same card under CUDA_VISIBLE_DEVICES
        try:
            self.handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except pynvml.NVMLError:
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        self.energy_start_mj = self._energy_mj()

    def _query(self, read):
        """One NVML reading, or None where this card does not support it."""
        try:
            return read(self.handle)
        except self.nvml.NVMLError:
            return None

    def _energy_mj(self) -> int | None:
        return self._query(self.nvml.nvmlDeviceGetTotalEnergyConsumption)

    def sample(self) -> dict:
        nvml = self.nvml
        readings = {
            "gpu_util": self._query(lambda handle: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
            "gpu_mem_gb": self._query(lambda handle: nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**30),
            "gpu_temp_c": self._query(
                lambda handle: float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))),
            "gpu_power_w": self._query(lambda handle: nvml.nvmlDeviceGetPowerUsage(handle) / 1000),
        }
        return {key: value for key, value in readings.items() if value is not None}

    def energy_wh(self) -> float | None:
        now = self._energy_mj()
        if now is None or self.energy_start_mj is None:
            return None
        return (now - self.energy_start_mj) / 3.6e6

    def close(self) -> None:
        self.nvml.nvmlShutdown()


class _Process:
    """This process on the CPU: utilization (100 = one core busy) and resident memory."""

    def __init__(self):
        self.process = psutil.Process()
        self.process.cpu_percent()  # the first call only starts the measurement

    def sample(self) -> dict:
        return {"cpu_util": self.process.cpu_percent(), "rss_gb": self.process.memory_info().rss / 2**30}

    def energy_wh(self) -> None:
        return None

    def close(self) -> None:
        pass


def _source(device: torch.device):
    if device.type != "cuda":
        return _Process()
    try:
        return _NvmlDevice(device)
    except Exception as error:  # no NVML library or no access to it (some containers): train on without it
        log.warning("no GPU telemetry (NVML: %s); logging this process's CPU and memory instead", error)
        return _Process()


# How each figure is summarized over the samples since the last record.
_REDUCE = {"gpu_util": "mean", "gpu_power_w": "mean", "cpu_util": "mean",
           "gpu_mem_gb": "max", "gpu_temp_c": "max", "rss_gb": "max"}


class TelemetrySampler:
    """Samples every `interval` seconds in a daemon thread between `start()` and `stop()`."""

    def __init__(self, device: torch.device, interval: float = 2.0):
        self.source = _source(device)
        self.interval = interval
        self.samples: list[dict] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)

    def start(self) -> "TelemetrySampler":
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.stopping.wait(self.interval):
            self.take_sample()

    def take_sample(self) -> None:
        """One sample now (the thread takes one every `interval` seconds)."""
        sample = self.source.sample()
        with self.lock:
            self.samples.append(sample)

    def read(self) -> dict:
        """Figures since the previous read (a fresh sample if none was taken); energy since start."""
        with self.lock:
            samples, self.samples = self.samples, []
        if not samples:
            samples = [self.source.sample()]
        figures = {}
        for key, how in _REDUCE.items():
            values = [sample[key] for sample in samples if key in sample]
            if values:
                figures[key] = round(sum(values) / len(values) if how == "mean" else max(values), 3)
        energy = self.source.energy_wh()
        if energy is not None:
            figures["energy_wh"] = round(energy, 3)
        return figures

    def energy_wh(self) -> float | None:
        return self.source.energy_wh()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()
        self.source.close()
