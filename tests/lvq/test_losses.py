"""The GLVQ cost: values, errors, and the autograd gradient against the closed
forms of Brinkrolf (2023) (eq. 2.12-2.14 for GLVQ, 2.16-2.19 for GMLVQ and
2.22-2.24 for LGMLVQ; eq. 2.23-2.24 drop a factor 2 against eq. 2.18-2.19, restored here)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_proto.lvq import (
    GLVQLayer,
    GMLVQLayer,
    LGMLVQLayer,
    glvq_cost_and_gradient,
    glvq_loss,
    glvq_margins,
    transfer,
    wtac,
)


def test_mu_values_and_winners():
    d = torch.tensor([[1.0, 3.0, 2.0], [4.0, 1.0, 0.5]])
    labels = torch.tensor([0, 0, 1])
    m = glvq_margins(d, torch.tensor([0, 1]), labels)
    torch.testing.assert_close(m.d_plus, torch.tensor([1.0, 0.5]))
    torch.testing.assert_close(m.d_minus, torch.tensor([2.0, 1.0]))
    torch.testing.assert_close(m.mu, torch.tensor([-1 / 3, -1 / 3]))
    assert m.index_plus.tolist() == [0, 2] and m.index_minus.tolist() == [2, 1]
    assert wtac(d, labels).tolist() == [0, 1]


def test_mu_is_bounded_and_negative_iff_correct():
    g = torch.Generator().manual_seed(1)
    d = torch.rand(50, 6, generator=g)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    targets = torch.randint(0, 3, (50,), generator=g)
    mu = glvq_margins(d, targets, labels).mu
    assert ((mu >= -1) & (mu <= 1)).all()
    correct = wtac(d, labels) == targets
    assert torch.equal(mu < 0, correct)


def test_transfer_and_reductions():
    mu = torch.tensor([-0.5, 0.0, 0.5])
    torch.testing.assert_close(transfer(mu, "sigmoid", 2.0), torch.sigmoid(2 * mu))
    d = torch.tensor([[1.0, 2.0], [3.0, 1.0]])
    labels = torch.tensor([0, 1])
    t = torch.tensor([0, 0])
    per = glvq_loss(d, t, labels, reduction="none")
    torch.testing.assert_close(per, torch.tensor([-1 / 3, 0.5]))
    torch.testing.assert_close(glvq_loss(d, t, labels), per.mean())
    torch.testing.assert_close(glvq_loss(d, t, labels, reduction="sum"), per.sum())
    with pytest.raises(ValueError, match="transfer"):
        transfer(mu, "tanh")
    with pytest.raises(ValueError, match="beta"):
        transfer(mu, "sigmoid", 0.0)
    with pytest.raises(ValueError, match="reduction"):
        glvq_loss(d, t, labels, reduction="max")


def test_errors_for_missing_classes():
    d = torch.rand(2, 2)
    with pytest.raises(ValueError, match="no prototype carries"):
        glvq_margins(d, torch.tensor([0, 2]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="two classes"):
        glvq_margins(d, torch.tensor([0, 0]), torch.tensor([0, 0]))


def _closed_form_grads(x, y, layer, labels):
    """Per-sample closed-form gradients of mu, summed over the batch.

    With d+ = d(x, w+), d- = d(x, w-) and D = (d+ + d-)^2:
      dmu/dd+ = 2 d- / D,  dmu/dd- = -2 d+ / D            (eq. 2.12, 2.13)
      dd/dw = -2 Lambda (x - w)                           (eq. 2.14, 2.16)
      dd/dOmega = 2 Omega (x - w)(x - w)^T                (eq. 2.18)
    """
    grads = {name: torch.zeros_like(p) for name, p in layer.named_parameters()}
    with torch.no_grad():
        dist = layer(x)
        m = glvq_margins(dist, y, labels)
        for i in range(x.shape[0]):
            jp, jm = int(m.index_plus[i]), int(m.index_minus[i])
            dp, dm = m.d_plus[i], m.d_minus[i]
            denom = (dp + dm) ** 2
            for j, coef in ((jp, 2 * dm / denom), (jm, -2 * dp / denom)):
                diff = x[i] - layer.prototypes[j]
                if isinstance(layer, LGMLVQLayer):
                    omega = layer.omegas[j]
                elif isinstance(layer, GMLVQLayer):
                    omega = layer.omega
                else:
                    omega = torch.eye(x.shape[1], dtype=x.dtype)
                lam = omega.T @ omega
                grads["prototypes"][j] += coef * (-2 * lam @ diff)
                dd_domega = 2 * torch.outer(omega @ diff, diff)
                if isinstance(layer, LGMLVQLayer):
                    grads["omegas"][j] += coef * dd_domega
                elif isinstance(layer, GMLVQLayer):
                    grads["omega"] += coef * dd_domega
    return grads


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["glvq", "gmlvq", "lgmlvq"]),
    st.integers(1, 6),  # batch size
    st.integers(1, 4),  # d
    st.integers(1, 3),  # prototypes per class
    st.integers(0, 2**31 - 1),
)
def test_autograd_matches_closed_form(kind, batch, d, per_class, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(3).repeat_interleave(per_class)
    W = len(labels)
    protos = torch.randn(W, d, generator=g, dtype=torch.float64)
    if kind == "glvq":
        layer = GLVQLayer(d, W, prototypes=protos, dtype=torch.float64)
    elif kind == "gmlvq":
        omega = torch.randn(max(d - 1, 1), d, generator=g, dtype=torch.float64)
        layer = GMLVQLayer(
            d, W, rank=omega.shape[0], prototypes=protos, omega_init=omega, normalize=False, dtype=torch.float64
        )
    else:
        omegas = torch.randn(W, d, d, generator=g, dtype=torch.float64)
        layer = LGMLVQLayer(d, W, prototypes=protos, omega_init=omegas, dtype=torch.float64)
    x = torch.randn(batch, d, generator=g, dtype=torch.float64) * 2
    y = torch.randint(0, 3, (batch,), generator=g)
    glvq_loss(layer(x), y, labels, reduction="sum").backward()
    expected = _closed_form_grads(x, y, layer, labels)
    for name, p in layer.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], atol=1e-8, rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 8),
    st.integers(1, 3),
    st.sampled_from(["identity", "sigmoid"]),
    st.floats(0.5, 10.0),
    st.integers(0, 2**31 - 1),
)
def test_closed_form_cost_gradient_matches_autograd(batch, per_class, transfer_fn, beta, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(3).repeat_interleave(per_class)
    distances = torch.rand(batch, len(labels), generator=g, dtype=torch.float64) * 4
    distances[0, 0] = 0.0  # a record on a prototype
    targets = torch.randint(0, 3, (batch,), generator=g)
    cost, grad = glvq_cost_and_gradient(distances, targets, labels, transfer_fn=transfer_fn, beta=beta)
    leaf = distances.clone().requires_grad_(True)
    expected_cost = glvq_loss(leaf, targets, labels, transfer_fn=transfer_fn, beta=beta, reduction="none")
    (expected_grad,) = torch.autograd.grad(expected_cost.sum(), leaf)
    torch.testing.assert_close(cost, expected_cost.detach())
    torch.testing.assert_close(grad, expected_grad)
    assert ((grad != 0).sum(1) <= 2).all()  # only the two winners
