"""The same code on CUDA (skipped on machines without a GPU)."""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler

from dp_proto.lvq import GMLVQ, LGMLVQ, GMLVQLayer, LGMLVQLayer, PrototypeModel

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("layer_cls", [GMLVQLayer, LGMLVQLayer])
def test_layers_match_cpu(layer_cls):
    g = torch.Generator().manual_seed(0)
    cpu = PrototypeModel(layer_cls(6, 4, omega_init="random", generator=g, dtype=torch.float64), [0, 1, 2, 3])
    gpu = PrototypeModel(layer_cls(6, 4, dtype=torch.float64), [0, 1, 2, 3]).cuda()
    gpu.load_state_dict(cpu.state_dict())
    x = torch.randn(32, 6, dtype=torch.float64)
    torch.testing.assert_close(gpu(x.cuda()).cpu(), cpu(x))
    assert gpu.predict(x.cuda()).device.type == "cuda"


@pytest.mark.parametrize("cls", [GMLVQ, LGMLVQ])
def test_estimators_on_cuda_match_cpu(cls):
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    cpu = cls(random_state=0, max_iter=100).fit(X, y)
    gpu = cls(random_state=0, max_iter=100, device="cuda").fit(X, y)
    assert abs(gpu.score(X, y) - cpu.score(X, y)) <= 0.02
    assert np.isfinite(gpu.prototypes_).all()
