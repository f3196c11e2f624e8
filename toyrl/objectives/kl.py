"""KL estimators between the policy and a reference, per token (Schulman, "Approximating KL").

With d = logp - ref_logp on tokens sampled from pi:

    k1  = d                        unbiased value; its expected gradient is zero
    abs = |d|
    k2  = d^2 / 2                  gradient of KL(pi || ref)
    k3  = exp(-d) + d - 1 >= 0     low variance; gradient of KL(ref || pi); verl clamps -d to
                                   [-20, 20] and the result to [-10, 10] (kept here)
    k1+, abs+, k3+                 straight-through: the value of k1 / abs / k3, the gradient of k2
                                   (verl's "k3+", the unbiased KL gradient)

Apply them only on policy tokens (the loss mask). Port names: verl's kl = k1, mse = k2,
low_var_kl = k3.
"""
from __future__ import annotations

import torch

__all__ = ["KL_ESTIMATORS", "kl_estimate", "k1", "kl_abs", "k2", "k3"]


def k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = logp - ref_logp. Example: logp [0., -1., -2.], ref [-1., -1., 0.] -> [1., 0., -2.]."""
    return logp - ref_logp


def kl_abs(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """|logp - ref_logp|. Example: logp [0., -1., -2.], ref [-1., -1., 0.] -> [1., 0., 2.]."""
    return (logp - ref_logp).abs()


def k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """(logp - ref_logp)^2 / 2. Example: logp [0., -1., -2.], ref [-1., -1., 0.] -> [.5, 0., 2.]."""
    return 0.5 * (logp - ref_logp).square()


def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """exp(ref - logp) - (ref - logp) - 1, with verl's clamps. Example: d [1., 0., -2.] -> [.3679, 0., 4.3891]."""
    x = (ref_logp - logp).clamp(-20.0, 20.0)
    return (torch.exp(x) - x - 1.0).clamp(-10.0, 10.0)


def _straight_through(value_fn):
    def est(logp, ref_logp):
        grad = k2(logp, ref_logp)
        return grad - grad.detach() + value_fn(logp, ref_logp).detach()
    est.__doc__ = f"Value of {value_fn.__name__}, gradient of k2 (straight-through)."
    return est


KL_ESTIMATORS = {
    "k1": k1, "abs": kl_abs, "k2": k2, "k3": k3,
    "k1+": _straight_through(k1), "abs+": _straight_through(kl_abs), "k3+": _straight_through(k3),
}


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL estimate (B, T) by name (see ``KL_ESTIMATORS``)."""
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"kl must be one of {sorted(KL_ESTIMATORS)}, got {kind!r}")
    if logp.shape != ref_logp.shape:
        raise ValueError(f"ref_logp must have the shape of logp (B, T)={tuple(logp.shape)}, "
                         f"got {tuple(ref_logp.shape)}")
    return KL_ESTIMATORS[kind](logp, ref_logp)
