#!/usr/bin/env python3
"""The learning-rate factors transformers' own schedulers apply, step by
step, for TrainLr.SchedulesAsTransformers (tests/runtime/test_train_loop.cc)
to hold tprun's runtime/train/lr.c to (1e-12).

Each case drives the scheduler as a training loop does: an optimizer at
lr 1 (so the rate is the factor), get_last_lr() read before each step,
then optimizer.step() and scheduler.step(). tests/fixtures/train/
lr_schedules.json gets, per case, tprun's settings (schedule, warmup,
steps, decay_steps, decay_type, min_lr at lr 1) beside the call that made
it and the factor of every step:
  get_wsd_schedule           each decay_type, with and without
                             min_lr_ratio, with and without a warm-up
  get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup,
  get_constant_schedule_with_warmup, get_cosine_with_min_lr_schedule_
  with_warmup                the schedules tprun had before, kept as they are

Needs torch and transformers; CI never runs it, it reads the committed file:
  python3 tools/lr_schedule_fixture.py [OUT_FILE]
"""
import json
import os
import sys
import warnings

import torch
import transformers
from transformers import (get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup,
                          get_cosine_with_min_lr_schedule_with_warmup, get_linear_schedule_with_warmup,
                          get_wsd_schedule)

STEPS = 20

# (tprun's settings, transformers' scheduler of them)
CASES = [
    ({"schedule": "wsd", "warmup": 4, "decay_steps": 6, "decay_type": decay, "min_lr": min_lr},
     lambda opt, s: get_wsd_schedule(opt, num_warmup_steps=s["warmup"], num_decay_steps=s["decay_steps"],
                                     num_training_steps=STEPS, decay_type=s["decay_type"], min_lr_ratio=s["min_lr"]))
    for decay in ("linear", "cosine", "1-sqrt") for min_lr in (0.0, 0.1)
] + [
    ({"schedule": "wsd", "warmup": 0, "decay_steps": 7, "decay_type": "1-sqrt", "min_lr": 0.05},
     lambda opt, s: get_wsd_schedule(opt, num_warmup_steps=0, num_decay_steps=7, num_training_steps=STEPS,
                                     decay_type="1-sqrt", min_lr_ratio=0.05)),
    ({"schedule": "cosine", "warmup": 4, "min_lr": 0.0},
     lambda opt, s: get_cosine_schedule_with_warmup(opt, num_warmup_steps=4, num_training_steps=STEPS)),
    ({"schedule": "cosine", "warmup": 4, "min_lr": 0.1},
     lambda opt, s: get_cosine_with_min_lr_schedule_with_warmup(opt, num_warmup_steps=4, num_training_steps=STEPS,
                                                                min_lr_rate=0.1)),
    ({"schedule": "linear", "warmup": 4, "min_lr": 0.0},
     lambda opt, s: get_linear_schedule_with_warmup(opt, num_warmup_steps=4, num_training_steps=STEPS)),
    ({"schedule": "constant", "warmup": 4, "min_lr": 0.0},
     lambda opt, s: get_constant_schedule_with_warmup(opt, num_warmup_steps=4)),
]


def factors(make, settings):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = make(opt, settings)
    out = []
    for _ in range(STEPS):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "train", "lr_schedules.json")
    warnings.simplefilter("error")   # a scheduler warning would mean the loop drives it wrong
    cases = []
    for settings, make in CASES:
        case = dict(settings, steps=STEPS, lr=1.0, factors=factors(make, settings))
        cases.append(case)
        print(f"{settings}: {', '.join(f'{f:.4f}' for f in case['factors'])}")
    with open(out, "w") as f:
        json.dump({"transformers": transformers.__version__, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
