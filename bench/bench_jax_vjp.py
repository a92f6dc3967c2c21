"""A gradient through ifusim.jax without a second forward run (issue 27, docs/gradients.md "A
forward kept for its backward"): the time of ``jax.value_and_grad`` of L = <G, cube> through
``ifusim.jax.cube``, before (the wrapper as it was: its backward called ``ifusim.vjp``, which ran
the forward again; copied below) and after (the forward kept by ``ifusim.forward``, its backward
only), against the plain Python calls from the same arrays: ``Galaxy.from_arrays`` then
``ifusim.run`` (the forward), or then ``ifusim.vjp`` (forward and backward in one call). Issue 27's
target: the JAX wrapper adds at most 10 % over the plain call,
value_and_grad / ifusim.vjp <= 1.10.

The run: configs/examples/muse_synthetic.json (MUSE 25 x 25 x 3721, MaStar, calc_ifu's stages,
the binned method, one cpu device) on a disc of --stars stars given as arrays (exponential, scale
1.5 kpc, inclined by the config's orientation, a tanh rotation curve of 200 km/s and 40 km/s
dispersion, ages 1-12 Gyr, Z 0.004-0.03, log-normal masses), float32 fields. Each row: the
median and the minimum of --reps rounds, each round every path once, back to back, in the order
printed (the minimum: the round least disturbed by other jobs on a shared machine). Also the
memory a kept forward holds: the bytes allocated (glibc's mallinfo2) that ``kept.release()``
frees.

  PYTHONPATH=build/python IFUSIM_DATA_DIR=... OMP_NUM_THREADS=2 build/venv/bin/python \\
      bench/bench_jax_vjp.py [--stars 1e5,1e6] [--reps 5]
"""

import argparse
import ctypes
import os
import statistics
import time

import numpy as np

import ifusim
import ifusim.jax

import jax
import jax.numpy as jnp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "examples", "muse_synthetic.json")
REDSHIFT = 0.05


def disc(n, seed=1):
    rng = np.random.default_rng(seed)
    r = rng.gamma(2.0, 1.5, n)  # kpc: an exponential disc's surface density (r e^(-r/h))
    phi = rng.uniform(0.0, 2.0 * np.pi, n)
    z = rng.laplace(0.0, 0.3, n)
    position = np.column_stack([r * np.cos(phi), r * np.sin(phi), z])
    v_rot = 200.0 * np.tanh(r / 1.5)
    velocity = np.column_stack([-v_rot * np.sin(phi), v_rot * np.cos(phi), np.zeros(n)])
    velocity += rng.normal(0.0, 40.0, (n, 3))
    return dict(
        position_kpc=position.astype(np.float32),
        velocity_kms=velocity.astype(np.float32),
        initial_mass_msun=(10 ** rng.normal(4.0, 0.3, n)).astype(np.float32),
        age_gyr=rng.uniform(1.0, 12.0, n).astype(np.float32),
        metallicity=rng.uniform(0.004, 0.03, n).astype(np.float32),
    )


def before_cube(config, stars, *, redshift):
    """ifusim.jax.cube as it was before the forward was kept: its backward ran ifusim.vjp, which
    runs the forward again (the same callbacks otherwise)."""
    shape = ifusim.jax._shape(config, None, redshift)
    names = sorted(stars)

    def run_on_host(*values):
        data = ifusim.run(config, galaxy=ifusim.jax._galaxy(dict(zip(names, values)), redshift),
                          progress=False).data
        return np.asarray(data, dtype=np.float32)

    def vjp_on_host(g, *values):
        grads = ifusim.vjp(config, ifusim.jax._galaxy(dict(zip(names, values)), redshift),
                           np.asarray(g, dtype=np.float64), progress=False)
        return tuple(
            np.asarray(grads.get("stars." + name, np.zeros(np.shape(v))), dtype=np.asarray(v).dtype)
            for name, v in zip(names, values)
        )

    out_type = jax.ShapeDtypeStruct(shape, jnp.float32)

    @jax.custom_vjp
    def run(*values):
        return jax.pure_callback(run_on_host, out_type, *values)

    def run_fwd(*values):
        return run(*values), values

    def run_bwd(values, g):
        types = tuple(jax.ShapeDtypeStruct(jnp.shape(v), jnp.result_type(v)) for v in values)
        return jax.pure_callback(vjp_on_host, types, g, *values)

    run.defvjp(run_fwd, run_bwd)
    return run(*(jnp.asarray(stars[name]) for name in names))


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def heap_bytes():
    """Bytes allocated now (glibc's mallinfo2: the main arena's chunks in use and every mmapped
    chunk; the resident set would not show a release, the allocator keeping freed pages)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def timed(f):
    t0 = time.perf_counter()
    out = f()
    return time.perf_counter() - t0, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stars", default="1e5,1e6")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    ifusim.set_log_level("error")  # the LSF's note on the templates' resolution, once a run
    print(f"{CONFIG}: MUSE, calc_ifu, binned, 1 cpu device, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', '(unset)')}, jax {jax.__version__}, "
          f"{args.reps} rounds")
    for n in (int(float(s)) for s in args.stars.split(",")):
        arrays = disc(n)
        galaxy = ifusim.Galaxy.from_arrays(arrays, redshift=REDSHIFT)
        reference = ifusim.run(CONFIG, galaxy=galaxy, progress=False)
        g = np.random.default_rng(2).normal(size=reference.data.shape).astype(np.float32)
        g64 = g.astype(np.float64)
        inputs = {k: jnp.asarray(v) for k, v in arrays.items()}

        def loss_of(cube_fn):
            def loss(s):
                cube = cube_fn(CONFIG, s, redshift=REDSHIFT)
                return jnp.sum(jnp.where(jnp.isnan(cube), 0.0, jnp.asarray(g) * cube))
            return jax.value_and_grad(loss)

        grad_before, grad_after = loss_of(before_cube), loss_of(ifusim.jax.cube)

        # The plain calls start from the arrays, as the wrapper does: Galaxy.from_arrays copies
        # and checks them (its warnings' checks measure the stars), a cost both pay.
        def from_arrays():
            return ifusim.Galaxy.from_arrays(arrays, redshift=REDSHIFT)

        def kept_path():
            _cube, kept = ifusim.forward(CONFIG, from_arrays(), progress=False)
            with kept:
                return kept.vjp(g64)

        def jax_path(f):
            value, grads = f(inputs)
            return float(value), {k: np.asarray(v) for k, v in grads.items()}

        paths = [
            ("Galaxy.from_arrays", from_arrays),
            ("ifusim.run (forward)", lambda: ifusim.run(CONFIG, galaxy=from_arrays(),
                                                        progress=False)),
            ("ifusim.vjp (forward + backward)", lambda: ifusim.vjp(CONFIG, from_arrays(), g64,
                                                                   progress=False)),
            ("ifusim.forward + kept.vjp", kept_path),
            ("jax.value_and_grad, before", lambda: jax_path(grad_before)),
            ("jax.value_and_grad, after", lambda: jax_path(grad_after)),
        ]
        times = {name: [] for name, _ in paths}
        results = {}
        for _ in range(args.reps):
            for name, f in paths:
                seconds, results[name] = timed(f)
                times[name].append(seconds)
        # The paths' gradients agree bitwise (float32 in JAX: the float64 gradients rounded once).
        plain = results["ifusim.vjp (forward + backward)"]
        for name in ("jax.value_and_grad, before", "jax.value_and_grad, after"):
            for field, want in plain.items():
                got = results[name][1][field.split(".", 1)[1]]
                assert np.array_equal(got, want.astype(np.float32)), (name, field)
        for field, want in plain.items():
            assert np.array_equal(results["ifusim.forward + kept.vjp"][field], want), field
        # The memory a kept forward holds.
        before_heap = heap_bytes()
        _cube, kept = ifusim.forward(CONFIG, galaxy, progress=False)
        del _cube
        held_heap = heap_bytes()
        kept.release()
        released_heap = heap_bytes()

        med = {name: statistics.median(t) for name, t in times.items()}
        low = {name: min(t) for name, t in times.items()}
        print(f"\n{n:.0e} stars ({galaxy.n_stars} given), cube {reference.data.shape}")
        print(f"  {'':<34} {'median':>8} {'min':>8}   (each round)")
        for name, _ in paths:
            print(f"  {name:<34} {med[name]:7.3f}s {low[name]:7.3f}s   (" +
                  ", ".join(f"{t:.3f}" for t in times[name]) + ")")
        ratios = [
            ("value_and_grad after / ifusim.vjp (target <= 1.10)",
             "jax.value_and_grad, after", "ifusim.vjp (forward + backward)"),
            ("value_and_grad before / ifusim.vjp",
             "jax.value_and_grad, before", "ifusim.vjp (forward + backward)"),
            ("value_and_grad before / after",
             "jax.value_and_grad, before", "jax.value_and_grad, after"),
            ("gradient / forward: after / ifusim.run",
             "jax.value_and_grad, after", "ifusim.run (forward)"),
            ("gradient / forward: before / ifusim.run",
             "jax.value_and_grad, before", "ifusim.run (forward)"),
            ("value_and_grad after / (forward + kept.vjp)",
             "jax.value_and_grad, after", "ifusim.forward + kept.vjp"),
        ]
        print(f"  {'ratio':<52} {'medians':>8} {'minima':>8}")
        for what, a, b in ratios:
            print(f"  {what:<52} {med[a] / med[b]:8.3f} {low[a] / low[b]:8.3f}")
        print(f"  kept forward: {(held_heap - before_heap) / 2**20:.1f} MiB allocated above "
              f"before it, {(held_heap - released_heap) / 2**20:.1f} MiB freed by release()")

if __name__ == "__main__":
    main()
