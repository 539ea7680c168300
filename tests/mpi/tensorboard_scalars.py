"""Prints the scalars of a --tensorboard-dir folder as JSON, {tag: {step: value}}, read by
TensorBoard's own reader (the `tensorboard` package: run with the test venv's python,
build/hf-venv, which CI builds). The suites compare them with --metrics-jsonl's records.

usage: python tests/mpi/tensorboard_scalars.py DIR"""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

events = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
events.Reload()
json.dump({tag: {e.step: e.value for e in events.Scalars(tag)}
           for tag in events.Tags()["scalars"]}, sys.stdout)
