"""Snapshot formats beyond IllustrisTNG (issue 24, readers): SWIFT files written by swiftsimio's own
Writer, EAGLE and GIZMO files built to their published specifications (snapshot_galaxy.py), read
by `ifusim inspect` and `ifusim.read`, their numbers against numpy/astropy computations of the
drawn galaxy, and a SWIFT file's cube against the cube of the same particles handed over through
Galaxy.from_arrays (bitwise).

swiftsimio needs numpy 2, the package's environment Debian's numpy 1: the SWIFT file is written by
the interpreter $IFUSIM_SWIFTSIMIO_PYTHON, the environment scripts/python-test-env.sh makes
(build/python-test-env, which ctest and scripts/test.sh name). Without it the SWIFT tests fail:
they never skip.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ifusim
import snapshot_galaxy as G

HERE = Path(__file__).resolve().parent
MASTAR = "${IFUSIM_DATA_DIR}/ssp/MaStar_CB19.12_1_5.fits.gz"

# Per-quantity tolerances: float32 storage (masses, metallicities, formation times) and the
# reader's float32 outputs, summed in double.
RTOL = {
    "stellar_mass_msun": 1e-5,  # swiftsimio's Msun (1.98841586e33) vs ifusim's (1.98841e33): 3e-7
    "stellar_initial_mass_msun": 1e-5,
    "redshift": 1e-9,
    "mass_weighted_age_gyr": 2e-4,  # float32 formation scale factors
    "mass_weighted_metallicity": 1e-5,
}


def swiftsimio_python():
    explicit = os.environ.get("IFUSIM_SWIFTSIMIO_PYTHON")
    if explicit and Path(explicit).is_file():
        return explicit
    pytest.fail(
        f"no Python with swiftsimio (IFUSIM_SWIFTSIMIO_PYTHON={explicit!r}): "
        "run scripts/python-test-env.sh and point IFUSIM_SWIFTSIMIO_PYTHON at its bin/python"
    )


@pytest.fixture(scope="module")
def galaxy():
    return G.draw()


@pytest.fixture(scope="module")
def swift_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("swift") / "snapshot_0042.hdf5"
    subprocess.run([swiftsimio_python(), str(HERE / "write_swift_snapshot.py"), str(path)],
                   check=True)
    return path


@pytest.fixture(scope="module")
def eagle_file(tmp_path_factory, galaxy):
    path = tmp_path_factory.mktemp("eagle") / "snap_028_z000p250.0.hdf5"
    G.write_eagle(path, *galaxy)
    return path


@pytest.fixture(scope="module")
def gizmo_file(tmp_path_factory, galaxy):
    path = tmp_path_factory.mktemp("gizmo") / "snapshot_600.hdf5"
    G.write_gizmo(path, galaxy[0], galaxy[1])
    return path


def inspect(cli, path, *args):
    result = subprocess.run([cli, "inspect", str(path), "--json", *args], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_summary(summary, stars, fmt):
    expected = G.expected_summary(stars)
    assert summary["format"] == fmt
    assert summary["n_stars"] == expected["n_stars"]
    for key, rtol in RTOL.items():
        assert summary[key] == pytest.approx(expected[key], rel=rtol), key
    # The centre, by shrinking spheres, lies near where the galaxy was put (physical kpc).
    centre_kpc = G.CENTRE_CKPC_H * G.SCALE_FACTOR / G.H
    assert np.linalg.norm(np.array(summary["center_kpc"]) - centre_kpc) < 2.0


def test_swift_inspect_matches_numpy(cli, swift_file, galaxy):
    summary = inspect(cli, swift_file)
    assert_summary(summary, galaxy[0], "swift")
    assert summary["n_gas"] == len(galaxy[1]["mass_msun"])
    assert summary["gas_mass_msun"] == pytest.approx(galaxy[1]["mass_msun"].sum(), rel=1e-5)


def test_swift_read_gives_peculiar_velocities_and_no_negative_sfr(swift_file, galaxy):
    stars, gas, _ = galaxy
    g = ifusim.read(swift_file)
    assert g.n_stars == len(stars["mass_msun"])
    v = g.stars["velocity_kms"]
    # Velocities are peculiar (no sqrt(a)); the bulk velocity (mass-weighted within the half-mass
    # radius) is taken off, so the dispersion is the drawn one's.
    assert np.std(v, axis=0) == pytest.approx(np.std(stars["velocity_kms"], axis=0), rel=0.02)
    assert np.all(np.isfinite(g.gas["sfr_msun_per_yr"]))
    assert g.gas["sfr_msun_per_yr"].min() == 0.0  # SWIFT's negative "last formed" values
    assert g.gas["sfr_msun_per_yr"][10:] == pytest.approx(gas["sfr_msun_per_yr"][10:], rel=1e-5,
                                                            abs=1e-12)


def test_swift_cube_equals_the_cube_of_the_same_particles_from_arrays(cli, swift_file, tmp_path):
    config = {
        "input": {"file": str(swift_file), "read_gas": False},
        "galaxy": {"redshift": 0.05},
        "telescope": "MUSE",
        "ssp": {"library": MASTAR, "outside_grid": "clamp"},
        "pipeline": ["aperture", "stellar_spectra", "psum"],
        "seed": 1,
    }
    path = tmp_path / "swift.json"
    path.write_text(json.dumps(config))
    subprocess.run([cli, "run", str(path), "--out", str(tmp_path / "file"), "--no-progress"],
                   check=True, capture_output=True)
    read = ifusim.read(swift_file, read_gas=False)
    arrays = ifusim.Galaxy.from_arrays({k: np.array(v) for k, v in read.stars.items()},
                                       redshift=read.redshift)
    cube = ifusim.run(config, galaxy=arrays, out=tmp_path / "arrays")
    assert np.nanmax(cube.data) > 0
    for name in ("cube.fits",):
        result = subprocess.run([cli, "compare", str(tmp_path / "file" / name),
                                 str(tmp_path / "arrays" / name), "--rtol", "0"],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
    # Streamed in blocks of 150 stars: the held file's cube, bitwise.
    streamed = ifusim.run(path, overrides={"input.stream_block_stars": 150})
    assert np.array_equal(streamed.data, cube.data)


def test_eagle_inspect_matches_numpy_for_a_subfind_group(cli, eagle_file, galaxy):
    stars, gas, other = galaxy
    summary = inspect(cli, eagle_file, "--subfind-group", "3", "0")
    assert_summary(summary, stars, "eagle")
    assert summary["n_gas"] == len(gas["mass_msun"])
    # Without a selection the other clump (GroupNumber 5) is read too.
    everything = inspect(cli, eagle_file)
    assert everything["n_stars"] == len(stars["mass_msun"]) + len(other["mass_msun"])


def test_eagle_region_and_ids_select_the_galaxy(eagle_file, galaxy):
    stars = galaxy[0]
    n = len(stars["mass_msun"])
    centre_cmpc_h = G.CENTRE_CKPC_H / 1e3
    by_region = ifusim.read(eagle_file, region=[*centre_cmpc_h, 0.3], read_gas=False)
    assert by_region.n_stars == n
    by_ids = ifusim.read(eagle_file, particle_ids=range(1, n + 1), read_gas=False)
    assert by_ids.n_stars == n
    assert np.sum(by_ids.stars["mass_msun"], dtype=np.float64) == pytest.approx(
        stars["mass_msun"].sum(), rel=1e-5)


def test_gizmo_inspect_matches_numpy(cli, gizmo_file, galaxy):
    summary = inspect(cli, gizmo_file)
    assert_summary(summary, galaxy[0] | {"initial_mass_msun": galaxy[0]["mass_msun"]}, "gadget")
    g = ifusim.read(gizmo_file, "gadget")
    # Metallicity column 0 (the total), not helium's column 1.
    assert g.stars["metallicity"].max() < 0.031


def test_a_file_of_no_known_format_is_refused_naming_it(cli, tmp_path):
    import h5py

    path = tmp_path / "not_a_snapshot.hdf5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.arange(4.0))
    result = subprocess.run([cli, "inspect", str(path)], capture_output=True, text=True)
    assert result.returncode != 0
    assert str(path) in result.stderr and "not a snapshot ifusim reads" in result.stderr
    with pytest.raises(ifusim.InputError, match="not a snapshot ifusim reads"):
        ifusim.read(path)


def test_a_bad_swift_value_is_refused_naming_file_dataset_and_row(cli, swift_file, tmp_path):
    import shutil

    import h5py

    bad = tmp_path / "bad.hdf5"
    shutil.copy(swift_file, bad)
    with h5py.File(bad, "r+") as f:
        f["PartType4/BirthScaleFactors"][7] = 0.95  # after the snapshot (a = 0.8)
    result = subprocess.run([cli, "inspect", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0
    assert f"{bad}:/PartType4/BirthScaleFactors" in result.stderr
    assert "row 7" in result.stderr


def test_a_chunked_eagle_snapshot_is_read_across_its_files(cli, eagle_file, galaxy, tmp_path):
    stars = galaxy[0]
    chunks = G.split_into_chunks(eagle_file, tmp_path / "snap_028_z000p250", 3)
    whole = inspect(cli, eagle_file, "--subfind-group", "3", "0")
    for chunk in (chunks[0], chunks[2]):  # any chunk names the snapshot
        summary = inspect(cli, chunk, "--subfind-group", "3", "0")
        assert summary["layout"] == "chunked file"
        assert_summary(summary, stars, "eagle")
        for key in ("stellar_mass_msun", "mass_weighted_age_gyr", "center_kpc", "n_gas"):
            assert summary[key] == whole[key], key
    Path(chunks[1]).unlink()
    result = subprocess.run([cli, "inspect", chunks[0]], capture_output=True, text=True)
    assert result.returncode != 0 and chunks[1] in result.stderr and "missing" in result.stderr


def test_an_eagle_group_streamed_gives_the_held_cube(eagle_file):
    config = {
        "input": {"file": str(eagle_file), "subfind_group": [3, 0], "read_gas": False},
        "galaxy": {"redshift": 0.05},
        "telescope": "MUSE",
        "ssp": {"library": MASTAR, "outside_grid": "clamp"},
        "pipeline": ["aperture", "stellar_spectra", "psum"],
        "seed": 1,
    }
    held = ifusim.run(config)
    assert held.summary["n_stars"] == 600
    streamed = ifusim.run(config, overrides={"input.stream_block_stars": 170})
    assert np.nanmax(held.data) > 0
    assert np.array_equal(streamed.data, held.data)


def test_a_swift_region_holds_the_stars_numpy_counts_within_it(swift_file, galaxy):
    stars = galaxy[0]
    # SWIFT's Coordinates are comoving Mpc (no h): the region is given in them.
    centre_cmpc = G.CENTRE_CKPC_H / G.H / 1e3
    radius_cmpc = 0.004
    comoving_offset_cmpc = stars["position_kpc"] / G.SCALE_FACTOR / 1e3
    inside = np.linalg.norm(comoving_offset_cmpc, axis=1) <= radius_cmpc
    assert 0 < inside.sum() < len(inside)  # the region cuts the galaxy
    g = ifusim.read(swift_file, region=[*centre_cmpc, radius_cmpc], read_gas=False)
    assert g.n_stars == inside.sum()
    assert np.sum(g.stars["mass_msun"], dtype=np.float64) == pytest.approx(
        stars["mass_msun"][inside].sum(), rel=1e-5)
