"""A pytest plugin (`-p cramming.bench.pytest_outcomes --outcomes=<file>`): one JSON line per test as it
ends, so that a suite stopped by a time limit still leaves what it found."""

import json


class OutcomeLog:
    def __init__(self, path: str):
        self.path = path

    def pytest_runtest_logreport(self, report) -> None:
        """A test's result is its call's, or a setup or teardown's that did not pass (a skip, an error)."""
        if report.when == "call" or report.outcome != "passed":
            line = {"test": report.nodeid, "when": report.when, "outcome": report.outcome,
                    "seconds": round(report.duration, 2)}
            with open(self.path, "a") as log:
                log.write(json.dumps(line) + "\n")


def pytest_addoption(parser) -> None:
    parser.addoption("--outcomes", help="append one JSON line per finished test to this file")


def pytest_configure(config) -> None:
    if config.getoption("outcomes"):
        config.pluginmanager.register(OutcomeLog(config.getoption("outcomes")), "cramming-outcome-log")
