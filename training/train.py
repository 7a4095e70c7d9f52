#!/usr/bin/env python
"""Train a prototype model from a YAML config (same as ``dp-proto train``).

python training/train.py --config training/configs/digits_gmlvq.yaml training.max_epochs=5
"""

import sys

from dp_proto.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
