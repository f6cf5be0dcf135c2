"""FAKE (tests only): the scenario the stand-in DCGM modules serve. See README.md here."""

import json
import os

SCENARIO = None


def load(scenario=None):
    """Set the scenario (a dict) or (re)read it from $GPUWATCH_FAKE_DCGM."""
    global SCENARIO
    if scenario is None:
        with open(os.environ["GPUWATCH_FAKE_DCGM"]) as f:
            scenario = json.load(f)
    SCENARIO = scenario
    return SCENARIO


def get():
    return SCENARIO if SCENARIO is not None else load()
