"""The readers' centre finder from Python: Galaxy.centre(), ifusim.find_centre and
Galaxy.from_arrays(centre="shrinking_spheres"), against galaxies moved by known vectors."""

import warnings

import numpy as np
import pytest

import ifusim
from test_ifusim import MASTAR, assert_has_light, small_config

OFFSET_KPC = np.array([1234.5, -567.25, 89.0])
BULK_KMS = np.array([300.0, -150.0, 80.0])


def disc_with_satellite(n_disc=4000, n_satellite=1000, seed=3):
    """An exponential disc (scale length 2 kpc, height 0.3 kpc, rotating at 200 km/s with a
    30 km/s dispersion) at rest at the origin, and a satellite of a quarter of its mass 30 kpc
    away moving at 400 km/s: it drags the centre of mass by 6 kpc and its mean velocity by
    80 km/s, but not the shrinking-spheres centre."""
    rng = np.random.default_rng(seed)
    r = rng.gamma(2.0, 2.0, n_disc)
    phi = rng.uniform(0, 2 * np.pi, n_disc)
    disc = np.column_stack([r * np.cos(phi), r * np.sin(phi), rng.laplace(0, 0.3, n_disc)])
    v_disc = np.column_stack([-200 * np.sin(phi), 200 * np.cos(phi), np.zeros(n_disc)])
    v_disc += rng.normal(0, 30, (n_disc, 3))
    sat = rng.normal([30.0, 0.0, 0.0], 0.5, (n_satellite, 3))
    v_sat = rng.normal([0.0, 400.0, 0.0], 20, (n_satellite, 3))
    # Symmetric disc: mirror every other star so that its own centre and velocity are ~0.
    half = n_disc // 2
    disc[half:] = -disc[: n_disc - half]
    v_disc[half:] = -v_disc[: n_disc - half]
    mass = rng.uniform(0.5e5, 1.5e5, n_disc + n_satellite)
    mass[half:n_disc] = mass[: n_disc - half]
    mass[n_disc:] *= 0.25 * mass[:n_disc].sum() / mass[n_disc:].sum()
    return dict(
        position_kpc=np.concatenate([disc, sat]),
        velocity_kms=np.concatenate([v_disc, v_sat]),
        initial_mass_msun=mass,
        mass_msun=mass,
        age_gyr=rng.uniform(1, 10, n_disc + n_satellite),
        metallicity=rng.uniform(0.004, 0.03, n_disc + n_satellite),
    )


def moved(stars, offset=OFFSET_KPC, bulk=BULK_KMS):
    out = dict(stars)
    out["position_kpc"] = stars["position_kpc"] + offset
    out["velocity_kms"] = stars["velocity_kms"] + bulk
    return out


def test_the_centre_and_bulk_velocity_of_a_moved_galaxy_are_recovered():
    stars = disc_with_satellite()
    at_rest = ifusim.find_centre(stars["position_kpc"], stars["velocity_kms"], stars["mass_msun"])
    found = ifusim.find_centre(
        moved(stars)["position_kpc"], moved(stars)["velocity_kms"], stars["mass_msun"])
    # Against the truth: the disc's mirror symmetry puts its centre at 0 and its bulk velocity
    # at 0; the shrinking spheres end on its central 50 stars, within 0.1 kpc of it (the
    # satellite's pull moves the centre of mass by 6 kpc: a centre of mass fails this).
    assert np.all(np.abs(found.position_kpc - OFFSET_KPC) < 0.1), found
    # The mass-weighted velocity of the stars within the half-mass radius: the disc's, whose
    # mirrored velocities cancel; the satellite (at 30 kpc, outside) would add 80 km/s.
    assert np.all(np.abs(found.velocity_kms - BULK_KMS) < 1.0), found
    assert 1.0 < found.halfmass_radius_kpc < 10.0
    # Against the unmoved galaxy: the same stars, moved by a vector in float64, give the same
    # spheres, so the centre moves by the vector up to the rounding of the positions (1e-13 of
    # 1234 kpc) and the velocity likewise.
    np.testing.assert_allclose(found.position_kpc, at_rest.position_kpc + OFFSET_KPC, atol=1e-9)
    np.testing.assert_allclose(found.velocity_kms, at_rest.velocity_kms + BULK_KMS, atol=1e-9)
    assert found.halfmass_radius_kpc == pytest.approx(at_rest.halfmass_radius_kpc, abs=1e-9)


def test_the_centre_in_a_periodic_box_wraps():
    stars = disc_with_satellite()
    box = 100.0
    # The disc straddles the box's corner: its stars are split between both ends of each axis.
    in_box = np.mod(stars["position_kpc"] + np.array([0.5, 99.8, 0.2]), box)
    assert in_box.min() < 5 and in_box.max() > 95
    found = ifusim.find_centre(in_box, stars["velocity_kms"], stars["mass_msun"], box_kpc=box)
    wrapped = (found.position_kpc - np.array([0.5, 99.8, 0.2]) + box / 2) % box - box / 2
    assert np.all(np.abs(wrapped) < 0.1), found
    assert np.all(np.abs(found.velocity_kms) < 1.0) and found.halfmass_radius_kpc < 10.0
    # Without the box the stars at both ends are 100 kpc apart: the spheres end in one corner's
    # piece of the disc, and the half-mass radius spans the box.
    unwrapped = ifusim.find_centre(in_box, stars["velocity_kms"], stars["mass_msun"])
    assert unwrapped.halfmass_radius_kpc > 5 * found.halfmass_radius_kpc


def test_galaxy_centre_of_a_held_galaxy():
    stars = disc_with_satellite()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # uncentred, moving: from_arrays warns, rightly
        galaxy = ifusim.Galaxy.from_arrays(moved(stars), redshift=0.05)
    centre = galaxy.centre()
    # The held positions are float32: 1234 kpc to 1.2e-4 kpc, and the spheres' edge stars may
    # differ; the centre stays within 0.1 kpc of the truth.
    assert np.all(np.abs(centre.position_kpc - OFFSET_KPC) < 0.1), centre
    assert np.all(np.abs(centre.velocity_kms - BULK_KMS) < 1.0), centre


def test_from_arrays_centres_by_shrinking_spheres():
    stars = disc_with_satellite()
    centred = ifusim.Galaxy.from_arrays(stars, redshift=0.05, centre="shrinking_spheres")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # centred and at rest: no warning about either
        from_moved = ifusim.Galaxy.from_arrays(
            moved(stars), redshift=0.05, centre="shrinking_spheres")
    # The same stars, centred from two places. The float64 offsets differ by their rounding
    # (1e-13 of 1234 kpc), which holding them as float32 (1e-7) absorbs unless a value lies that
    # close to a float32 rounding boundary: then it differs by its last bit (a few of these
    # 15,000 velocities do), never more.
    for name in ("position_kpc", "velocity_kms"):
        np.testing.assert_array_max_ulp(from_moved.stars[name], centred.stars[name], maxulp=1)
        assert np.mean(from_moved.stars[name] != centred.stars[name]) < 1e-3, name
    centre = from_moved.centre()
    assert np.all(np.abs(centre.position_kpc) < 1e-4) and np.all(np.abs(centre.velocity_kms) < 1e-3)
    with pytest.raises(ifusim.InputError, match="centre='middle'"):
        ifusim.Galaxy.from_arrays(stars, centre="middle")


def test_cube_of_a_moved_galaxy_centred_equals_the_cube_of_the_centred_one():
    stars = disc_with_satellite(n_disc=1000, n_satellite=250)
    config = small_config(galaxy={"redshift": 0.05})
    centred_galaxy, moved_galaxy = (
        ifusim.Galaxy.from_arrays(s, redshift=0.05, centre="shrinking_spheres")
        for s in (stars, moved(stars)))
    centred = ifusim.run(config, galaxy=centred_galaxy)
    from_moved = ifusim.run(config, galaxy=moved_galaxy)
    assert_has_light(centred)
    # These stars' held fields come out bitwise equal (none lies at a float32 rounding
    # boundary: previous test), so the cubes must be bitwise equal.
    for name in ("position_kpc", "velocity_kms"):
        assert np.array_equal(moved_galaxy.stars[name], centred_galaxy.stars[name]), name
    assert np.array_equal(from_moved.data, centred.data)
    # Moved by 1 kpc and 100 km/s along the line of sight, not centred: a different cube, so
    # the comparison above can fail.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the bulk velocity left in, rightly warned about
        shifted = ifusim.run(config, galaxy=ifusim.Galaxy.from_arrays(
            moved(stars, [1.0, 0.5, 0.0], [0.0, 0.0, 100.0]), redshift=0.05))
    assert not np.allclose(shifted.data, centred.data, rtol=1e-3, atol=1e-3 * centred.data.max())
