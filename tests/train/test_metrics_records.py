"""When metrics records are written: by steps, by training progress (so a short run still draws a curve),
and what the last, budget-cut step says about its smaller batch; the run line's parameter count."""

import logging

from cramming.pretraining import pretrain
from tests.train.runs import STEP_RUN, TINY_RUN, compose_config, records


def test_a_record_at_least_every_fraction_of_training(shared_cache, tmp_path):
    run_dir = pretrain(compose_config(STEP_RUN + [f"output_dir={tmp_path}", "logging.every_steps=100",
                                                  "logging.every_fraction=0.25"]))
    # after step s of 8, training has progressed s / 8: a quarter more every two steps
    assert [record["step"] for record in records(run_dir)] == [2, 4, 6, 8]


def test_the_budget_cut_last_step_says_its_planned_batch(shared_cache, tmp_path, simulated_clock, caplog):
    with caplog.at_level(logging.INFO, logger="pretrain"):
        # the original recipe's ramp to 8192 sequences: the budget ends inside a step of many microbatches
        run_dir = pretrain(compose_config(TINY_RUN + ["train=cramming", "budget=0.001", f"output_dir={tmp_path}",
                                                      "logging.every_steps=1"]))
    *earlier, last = records(run_dir)
    assert all("planned_batch_size" not in record for record in earlier)
    assert last["batch_size"] < last["planned_batch_size"]  # the ramp stays monotone in what was planned
    assert earlier[-1]["batch_size"] <= last["planned_batch_size"]
    lines = [record.getMessage() for record in caplog.records]
    assert any(f"batch {last['batch_size']} of {last['planned_batch_size']} (the budget ran out mid-step)" in line
               for line in lines)
    (run_line,) = [line for line in lines if line.startswith("run ")]
    assert "crammed-bert-tiny, 0.9M parameters, on cpu" in run_line  # vocabulary 4096 (data=embedded)
