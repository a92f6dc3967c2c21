"""PyTorch interface of ifusim (issue 27, docs/gradients.md "From PyTorch").

``ifusim.torch.cube(config, stars, redshift=..., gas=...)`` is the run's cube as a torch tensor,
differentiable with respect to the star (and gas) fields: ``loss.backward()`` works through a
whole ifusim run. A ``torch.autograd.Function`` whose forward calls :func:`ifusim.forward` and keeps the run
in its ``ctx``, and whose backward calls the kept run's ``vjp`` (bitwise :func:`ifusim.vjp`'s, as
in :mod:`ifusim.jax`, with the same field names), so a gradient costs one forward and one
backward pass. Where no field requires a gradient (or under ``torch.no_grad``), the forward is
:func:`ifusim.run` and nothing is kept.

The kept run's lifetime: the backward releases it; a graph never differentiated releases it when
autograd frees the graph (the cube tensor and everything computed from it dropped). A second
backward through the same graph (``retain_graph=True``) calls :func:`ifusim.vjp`, which runs the
forward again: the same gradients, bitwise.

What crosses without a copy: CPU tensors are handed to the engine as numpy views
(``Tensor.numpy()``), the cube comes back as a tensor over the engine's own float32 buffer
(``torch.from_numpy`` of ``Cube.data``, a strided view in the engine's spaxel-major order), and
float64 gradients of float64 fields come back as tensors over the arrays ``ifusim.vjp`` returns.
What is copied, and why: ``Galaxy.from_arrays`` copies the fields into the engine's float32
particle arrays (the engine owns them); the cotangent is converted once to float64 in the engine's
spaxel-major order (the adjoints run in double); the gradients are cast to each field's dtype
(float32 fields get float32 gradients, as in :mod:`ifusim.jax`); tensors on a GPU are copied to
the host and back (the engine's Python entry reads host memory). DLPack does not apply: on the
CPU the numpy views already share memory, and the engine takes no device pointers from Python.

Needs torch (``pip install ".[torch]"``), which the package does not install by default.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import numpy as np

import ifusim

try:
    import torch
except ImportError as error:  # pragma: no cover - exercised where torch is missing
    raise ImportError('ifusim.torch needs torch: pip install ".[torch]" (or pip install torch)') \
        from error

__all__ = ["cube"]


def _host_array(value: "torch.Tensor") -> np.ndarray:
    """A numpy view of a CPU tensor (a copy only for a tensor on another device)."""
    return value.detach().cpu().numpy()


def _galaxy(keys, values, redshift: float, with_gas: bool) -> "ifusim.Galaxy":
    """The galaxy of the fields keyed as ifusim.vjp names them ("stars.age_gyr", "gas.*")."""
    parts: Dict[str, Dict[str, np.ndarray]] = {"stars": {}, "gas": {}}
    for key, value in zip(keys, values):
        kind, name = key.split(".", 1)
        parts[kind][name] = _host_array(value)
    return ifusim.Galaxy.from_arrays(parts["stars"], redshift=redshift,
                                     gas=parts["gas"] if with_gas else None)


def _spaxel_major_cotangent(grad: "torch.Tensor") -> np.ndarray:
    """dL/d(cube) as ``ifusim.vjp`` takes it, (n_wave, ny, nx) float64, made with one copy: the
    array is the view of a C-ordered (ny, nx, n_wave) one, the engine's spaxel-major order, so
    that ``ifusim.vjp``'s own conversion to that order finds it already made."""
    spaxel_major = np.ascontiguousarray(np.moveaxis(_host_array(grad), 0, -1), dtype=np.float64)
    return np.moveaxis(spaxel_major, -1, 0)


class _Run(torch.autograd.Function):
    """The engine's run on the star fields (forward) and its VJP (backward)."""

    @staticmethod
    def forward(ctx, spec: Dict[str, Any], *values: "torch.Tensor") -> "torch.Tensor":
        ctx.spec = spec
        ctx.save_for_backward(*values)
        galaxy = _galaxy(spec["names"], values, spec["redshift"], spec["with_gas"])
        ctx.kept = None
        if any(ctx.needs_input_grad[1:]):
            result, ctx.kept = ifusim.forward(spec["config"], galaxy, overrides=spec["overrides"],
                                              progress=False)
        else:
            result = ifusim.run(spec["config"], galaxy=galaxy, overrides=spec["overrides"],
                                progress=False)
        # A view of the engine's buffer; the tensor keeps the numpy array, and so the cube, alive.
        return torch.from_numpy(result.data).to(values[0].device)

    @staticmethod
    def backward(ctx, grad: "torch.Tensor"):
        spec = ctx.spec
        values = ctx.saved_tensors
        kept, ctx.kept = ctx.kept, None
        if kept is not None:
            try:
                grads = kept.vjp(_spaxel_major_cotangent(grad))
            finally:
                kept.release()
        else:  # a second backward (retain_graph=True): the forward runs again
            grads = ifusim.vjp(spec["config"],
                               _galaxy(spec["names"], values, spec["redshift"], spec["with_gas"]),
                               _spaxel_major_cotangent(grad), overrides=spec["overrides"],
                               progress=False)
        out = []
        for name, value, needed in zip(spec["names"], values, ctx.needs_input_grad[1:]):
            if not needed:
                out.append(None)
            elif name in grads:
                out.append(torch.from_numpy(grads[name]).to(dtype=value.dtype,
                                                             device=value.device))
            else:  # positions without smoothing, the stars' mass_msun: not differentiated
                out.append(torch.zeros_like(value))
        return (None, *out)


def cube(
    config: Any,
    stars: Mapping[str, Any],
    *,
    redshift: float,
    gas: Optional[Mapping[str, Any]] = None,
    overrides: Optional[Mapping[str, Any]] = None,
) -> "torch.Tensor":
    """The cube's data (n_wave, ny, nx), float32, of ``config`` run on the stars ``stars`` (the
    arrays :meth:`ifusim.Galaxy.from_arrays` takes for its ``stars``, as torch tensors or numpy
    arrays) and, where given, the gas cells ``gas`` (those it takes for its ``gas``), on the
    device of the first star field (by name).

    Its backward gives every field of ``stars`` and ``gas`` that requires a gradient one of the
    field's shape and dtype: the keys :func:`ifusim.vjp` fills (``initial_mass_msun``,
    ``age_gyr``, ``metallicity``, ``velocity_kms`` of the stars, and their ``position_kpc`` where
    the aperture's smoothing is ``"kernel"``; with emission lines the gas's ``sfr_msun_per_yr``,
    ``metallicity``, ``velocity_kms``; with dust the gas's ``mass_msun``) from the kept forward's
    ``vjp`` (bitwise :func:`ifusim.vjp`'s); zeros for the fields the engine does not
    differentiate (positions without the stars' kernel smoothing: the spaxel a particle falls in
    is piecewise constant; the stars' ``mass_msun`` and ``smoothing_length_kpc``; the gas's
    density). NaN voxels of the cube (outside a circular aperture) are constants of the model.
    The cube is a view of the engine's buffer,
    not contiguous (the engine's order is spaxel-major).
    """
    if not stars:
        raise ValueError("stars: no fields given (expected the arrays Galaxy.from_arrays takes)")
    fields = {"stars." + name: value for name, value in stars.items()}
    fields.update({"gas." + name: value for name, value in (gas or {}).items()})
    names = sorted(fields, key=lambda key: (not key.startswith("stars."), key))
    values = [torch.as_tensor(fields[name]) for name in names]
    spec = {"config": config, "names": names, "redshift": float(redshift),
            "with_gas": gas is not None,
            "overrides": dict(overrides) if overrides is not None else None}
    return _Run.apply(spec, *values)
