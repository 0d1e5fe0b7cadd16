"""The first-GPU check: `python scripts/gpu_check.py` or `cramming-gpu-check` (cramming.bench.gpu_check
does the work).

    python scripts/gpu_check.py stage=quick data_files='shards/train-00[01].txt.gz' glue_dir=glue   # < 8 minutes
    python scripts/gpu_check.py stage=bench
    python scripts/gpu_check.py stage=cram data_files='shards/train-000*.txt.gz'
    python scripts/gpu_check.py stage=glue glue_dir=glue
    python scripts/gpu_check.py stage=all data_files='shards/*.txt.gz' glue_dir=glue
"""

from hydra.core.config_store import ConfigStore

from cramming.bench.gpu_check import GpuCheckConfig, run_gpu_check
from cramming.cli import hydra_command

ConfigStore.instance().store(name="gpu_check_schema", node=GpuCheckConfig)


@hydra_command("gpu_check", GpuCheckConfig, directories=("output_dir",), path_keys=("data_files", "glue_dir"))
def main(cfg: GpuCheckConfig) -> None:
    run_gpu_check(cfg)


if __name__ == "__main__":
    main()
