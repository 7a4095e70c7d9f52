"""Shared fixtures: the real data directory (tests that need it skip when it is absent).

The suite's tensors are small, where one intra-op thread is fastest and immune to the
slow-downs of oversubscribed cores; DP_PROTO_TEST_THREADS overrides it.
"""

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(int(os.environ.get("DP_PROTO_TEST_THREADS", "1")))


@pytest.fixture(autouse=True)
def _fresh_privacy_session():
    """Every test starts a new session ledger (``dp_proto.privacy.session_ledger``): its
    fits are counted from zero, independent of the tests before it."""
    from dp_proto.privacy import reset_session

    reset_session()


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    env = os.environ.get("DP_PROTO_DATA_DIR")
    candidate = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"
    if not candidate.is_dir():
        pytest.skip(f"real data directory not found ({candidate}); set DP_PROTO_DATA_DIR")
    return candidate
