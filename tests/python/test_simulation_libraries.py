"""Galaxy.from_swiftsimio and Galaxy.from_pynbody on files written by swiftsimio's and pynbody's
own writers and read back by their own readers, checked against numbers computed here with
numpy (and astropy's cosmology) from the arrays written.

swiftsimio and pynbody are imported at the top: where they are missing this file fails, it is
never skipped (scripts/python-test-env.sh installs them for ctest and CI).
"""

import math

import h5py
import numpy as np
import pynbody
import pytest
import swiftsimio
import unyt
from astropy.cosmology import FlatLambdaCDM

import ifusim
from test_centre import disc_with_satellite

A_SNAP = 0.8  # the snapshots' scale factor: z = 0.25
H0, OMEGA_M = 70.0, 0.3
# The snapshots' cosmology, flat and without radiation, as both files state it.
COSMOLOGY = FlatLambdaCDM(H0=H0, Om0=OMEGA_M, Tcmb0=0)
T_SNAP_GYR = COSMOLOGY.age(1 / A_SNAP - 1).value
# Where the galaxy sits in the box (comoving Mpc): near a corner, so that it wraps.
BOX_CMPC = 10.0
AT_CMPC = np.array([0.001, 5.0, 9.999])


def galaxy_arrays(n_disc=1600, n_satellite=400, n_gas=500, seed=5):
    """Stars (a disc and a satellite, test_centre) and gas, physical, relative to the galaxy,
    plus the birth scale factors the stars' ages come from; float32 where the files hold
    float32."""
    stars = disc_with_satellite(n_disc, n_satellite, seed)
    rng = np.random.default_rng(seed + 1)
    n = n_disc + n_satellite
    stars["birth_a"] = rng.uniform(0.15, 0.78, n)
    stars["initial_mass_msun"] = stars["mass_msun"] * rng.uniform(1.0, 1.6, n)
    gas = dict(
        position_kpc=rng.normal(0, 3.0, (n_gas, 3)),
        velocity_kms=rng.normal(0, 50.0, (n_gas, 3)),
        mass_msun=rng.uniform(1e5, 3e5, n_gas),
        density_msun_per_kpc3=10 ** rng.uniform(5, 8, n_gas),
        metallicity=rng.uniform(0.001, 0.03, n_gas),
        # SWIFT's convention: a negative rate is minus the scale factor of the last star
        # formation of a particle that forms no stars now.
        sfr_msun_per_yr=np.where(rng.random(n_gas) < 0.3, -rng.uniform(0.2, 0.8, n_gas),
                                 rng.uniform(0, 0.01, n_gas)),
        internal_energy_km2_s2=rng.uniform(100, 1e4, n_gas),
    )
    return stars, gas


def mass_weighted(values, mass):
    return float(np.sum(values * mass) / np.sum(mass))


# ---- swiftsimio ------------------------------------------------------------------------------

KERNEL_GAMMA = 1.825742  # SWIFT's cubic spline kernel: support radius / h


def add_swift_dataset(group, name, values, exponents, a_exponent, units):
    """A dataset as SWIFT writes one, with its unit metadata (exponents of the file's base
    units, the a-scale exponent; SWIFT has no h factors), in the file's internal units."""
    ds = group.create_dataset(name, data=values)
    names = dict(M="mass", L="length", t="time", I="current", T="temperature")
    cgs = 1.0
    for base, exponent in exponents.items():
        cgs *= float(units.attrs[f"Unit {names[base]} in cgs (U_{base})"][0]) ** exponent
    ds.attrs["Conversion factor to CGS (not including cosmological corrections)"] = [cgs]
    ds.attrs["Conversion factor to physical CGS (including cosmological corrections)"] = [
        cgs * A_SNAP**a_exponent]
    for base in ("I", "L", "M", "T", "t"):
        ds.attrs[f"U_{base} exponent"] = [float(exponents.get(base, 0.0))]
    ds.attrs["a-scale exponent"] = [float(a_exponent)]
    ds.attrs["h-scale exponent"] = [0.0]


@pytest.fixture(scope="module")
def swift_snapshot(tmp_path_factory):
    """A SWIFT snapshot written by swiftsimio.Writer (its required fields, in its Gadget-like
    cosmological units: Mpc, 1e10 Msun, km/s, comoving), with the fields a SWIFT run adds
    (BirthScaleFactors, InitialMasses, MetalMassFractions, Densities, StarFormationRates) and
    the Cosmology and HydroScheme groups added to SWIFT's own layout."""
    from swiftsimio import Writer, cosmo_array
    from swiftsimio.metadata.writer.unit_systems import cosmo_units

    stars, gas = galaxy_arrays()
    path = tmp_path_factory.mktemp("swift") / "snapshot_0001.hdf5"
    kw = dict(comoving=True, scale_factor=A_SNAP)

    def array(values, unit, exponent):
        # A copy: the Writer converts a cosmo_array to its unit system in place.
        return cosmo_array(np.array(values, dtype=np.float64), unit, scale_exponent=exponent,
                           **kw)

    def comoving_mpc(position_kpc):  # physical kpc around the galaxy -> comoving Mpc in the box
        return np.mod(AT_CMPC + position_kpc / 1000.0 / A_SNAP, BOX_CMPC)

    w = Writer(unit_system=cosmo_units, scale_factor=A_SNAP,
               boxsize=array([BOX_CMPC] * 3, unyt.Mpc, 1),
               extra_header={"Redshift": [1 / A_SNAP - 1]})
    w.stars.coordinates = array(comoving_mpc(stars["position_kpc"]), unyt.Mpc, 1)
    w.stars.velocities = array(stars["velocity_kms"], unyt.km / unyt.s, 0)
    w.stars.masses = array(stars["mass_msun"], unyt.Msun, 0)
    stars["h_cmpc"] = np.full(len(stars["mass_msun"]), 0.4e-3)
    w.stars.smoothing_lengths = array(stars["h_cmpc"], unyt.Mpc, 1)
    w.gas.coordinates = array(comoving_mpc(gas["position_kpc"]), unyt.Mpc, 1)
    w.gas.velocities = array(gas["velocity_kms"], unyt.km / unyt.s, 0)
    w.gas.masses = array(gas["mass_msun"], unyt.Msun, 0)
    w.gas.smoothing_lengths = cosmo_array(np.full(len(gas["mass_msun"]), 1e-3), unyt.Mpc,
                                          scale_exponent=1, **kw)
    # Physical u = a^-2 x comoving (SWIFT's a-scale exponent -2 for InternalEnergies).
    w.gas.internal_energy = array(gas["internal_energy_km2_s2"] * A_SNAP**2,
                                  unyt.km**2 / unyt.s**2, -2)
    w.write(str(path))

    mass_unit = unyt.Unit("1e10*Msun")
    time_unit = unyt.Mpc / (unyt.km / unyt.s)
    with h5py.File(path, "a") as f:
        units = f["Units"]
        s, g = f["PartType4"], f["PartType0"]
        # swiftsimio 12.4's Writer records an "a-scale exponent" of 1 for fields of a^0 (its
        # physical conversion factor, rightly, has no a in it): SWIFT writes 0 there, and so do
        # we, or every reader that trusts the exponent (swiftsimio's own to_physical among them)
        # would take masses and velocities as a x their values.
        for group in (s, g):
            for name in ("Masses", "Velocities"):
                group[name].attrs["a-scale exponent"] = [0.0]
        add_swift_dataset(s, "BirthScaleFactors", stars["birth_a"], {}, 0, units)
        add_swift_dataset(s, "InitialMasses",
                          (stars["initial_mass_msun"] * unyt.Msun).to_value(mass_unit),
                          {"M": 1}, 0, units)
        add_swift_dataset(s, "MetalMassFractions", stars["metallicity"], {}, 0, units)
        # Comoving density = a^3 x physical (a-scale exponent -3).
        add_swift_dataset(
            g, "Densities",
            (gas["density_msun_per_kpc3"] * A_SNAP**3 * unyt.Msun / unyt.kpc**3).to_value(
                mass_unit / unyt.Mpc**3), {"M": 1, "L": -3}, -3, units)
        add_swift_dataset(g, "MetalMassFractions", gas["metallicity"], {}, 0, units)
        add_swift_dataset(
            g, "StarFormationRates",
            (gas["sfr_msun_per_yr"] * unyt.Msun / unyt.yr).to_value(mass_unit / time_unit),
            {"M": 1, "t": -1}, 0, units)
        cosmology = f.create_group("Cosmology")
        # H0 in internal units (1 / (Mpc / (km/s))) is H0 in km/s/Mpc.
        for key, value in {"Cosmological run": [1], "H0 [internal units]": [H0],
                           "Omega_m": [OMEGA_M], "Omega_lambda": [1 - OMEGA_M],
                           "Omega_b": [0.048], "Omega_r": [0.0], "w_0": [-1.0], "w_a": [0.0],
                           "h": [H0 / 100], "Scale-factor": [A_SNAP],
                           "Redshift": [1 / A_SNAP - 1]}.items():
            cosmology.attrs[key] = value
        f.create_group("HydroScheme").attrs["Kernel gamma"] = [KERNEL_GAMMA]
    return path, stars, gas


def test_from_swiftsimio_matches_the_arrays_written(swift_snapshot):
    path, stars, gas = swift_snapshot
    galaxy = ifusim.Galaxy.from_swiftsimio(swiftsimio.load(str(path)))
    assert galaxy.n_stars == len(stars["mass_msun"]) and galaxy.n_gas == len(gas["mass_msun"])
    assert galaxy.redshift == pytest.approx(1 / A_SNAP - 1, rel=1e-12)
    s, g = galaxy.stars, galaxy.gas
    # Masses: written in 1e10 Msun as float64, held as float32 (rtol 1e-6 of a sum).
    assert s["mass_msun"].sum(dtype=np.float64) == pytest.approx(stars["mass_msun"].sum(), rel=1e-6)
    assert s["initial_mass_msun"].sum(dtype=np.float64) == pytest.approx(
        stars["initial_mass_msun"].sum(), rel=1e-6)
    # Ages: the snapshot's age of the Universe minus that at each birth scale factor, by
    # astropy's flat LambdaCDM here (swiftsimio's w0waCDM from the Cosmology group there).
    ages = T_SNAP_GYR - COSMOLOGY.age(1 / stars["birth_a"] - 1).value
    assert ages.min() > 0.1
    np.testing.assert_allclose(s["age_gyr"], ages, rtol=1e-5, atol=1e-5)
    assert mass_weighted(s["age_gyr"], s["mass_msun"]) == pytest.approx(
        mass_weighted(ages, stars["mass_msun"]), rel=1e-5)
    assert mass_weighted(s["metallicity"], s["mass_msun"]) == pytest.approx(
        mass_weighted(stars["metallicity"], stars["mass_msun"]), rel=1e-5)
    # Positions: the galaxy was written around AT_CMPC, wrapped in the box; centred by the
    # readers' shrinking spheres they are the arrays written less that centre (1e-4 kpc: the
    # float32 holding of kpc-scale values; the file's 8 Mpc ones round to 1e-12 Mpc).
    centre = ifusim.find_centre(stars["position_kpc"], stars["velocity_kms"], stars["mass_msun"])
    np.testing.assert_allclose(s["position_kpc"], stars["position_kpc"] - centre.position_kpc,
                               rtol=0, atol=1e-4)
    # The bulk velocity sums over the stars within the half-mass radius, where a star at that
    # radius may fall in or out between the box coordinates and the arrays here (they round
    # differently): 0.001 km/s seen, 0.01 km/s allowed.
    np.testing.assert_allclose(s["velocity_kms"], stars["velocity_kms"] - centre.velocity_kms,
                               rtol=0, atol=1e-2)
    # SWIFT's h in comoving Mpc -> the kernel's support radius gamma h, physical kpc.
    np.testing.assert_allclose(s["smoothing_length_kpc"],
                               KERNEL_GAMMA * stars["h_cmpc"] * 1000 * A_SNAP, rtol=1e-6)
    # Gas: a-scale exponents -3 (density) and -2 (internal energy) undone by swiftsimio.
    assert g["mass_msun"].sum(dtype=np.float64) == pytest.approx(gas["mass_msun"].sum(), rel=1e-6)
    np.testing.assert_allclose(g["density_msun_per_kpc3"], gas["density_msun_per_kpc3"],
                               rtol=1e-5)
    np.testing.assert_allclose(g["internal_energy_km2_s2"], gas["internal_energy_km2_s2"],
                               rtol=1e-5)
    assert mass_weighted(g["metallicity"], g["mass_msun"]) == pytest.approx(
        mass_weighted(gas["metallicity"], gas["mass_msun"]), rel=1e-5)
    # Negative rates (the last star formation's scale factor) are rates of 0.
    sfr = np.maximum(gas["sfr_msun_per_yr"], 0)
    assert (g["sfr_msun_per_yr"] == 0).sum() == (sfr == 0).sum() > 0
    assert g["sfr_msun_per_yr"].sum(dtype=np.float64) == pytest.approx(sfr.sum(), rel=1e-5)
    np.testing.assert_allclose(g["position_kpc"], gas["position_kpc"] - centre.position_kpc,
                               rtol=0, atol=1e-4)


def test_from_swiftsimio_region_and_errors(swift_snapshot):
    path, stars, gas = swift_snapshot
    data = swiftsimio.load(str(path))
    at_kpc = AT_CMPC * 1000 * A_SNAP
    # The disc's stars within 10 kpc of where it was written (across the box's faces).
    galaxy = ifusim.Galaxy.from_swiftsimio(data, region=(at_kpc, 10.0), read_gas=False)
    inside = np.einsum("ij,ij->i", stars["position_kpc"], stars["position_kpc"]) <= 100.0
    assert galaxy.n_stars == inside.sum() > 0 and galaxy.n_gas == 0
    assert galaxy.stars["mass_msun"].sum(dtype=np.float64) == pytest.approx(
        stars["mass_msun"][inside].sum(), rel=1e-6)
    # With a region as unyt quantities: the same stars.
    same = ifusim.Galaxy.from_swiftsimio(
        data, region=(at_kpc * unyt.kpc, 0.01 * unyt.Mpc), read_gas=False)
    assert same.n_stars == galaxy.n_stars
    with pytest.raises(ifusim.InputError, match="centre='middle'"):
        ifusim.Galaxy.from_swiftsimio(data, centre="middle")


# ---- pynbody ---------------------------------------------------------------------------------

# A gasoline/ChaNGa run's units (its .param file): G = 1, lengths in dKpcUnit comoving kpc,
# masses in dMsolUnit; velocity and time units follow (pynbody.snapshot.tipsy.param2units).
KPC_UNIT, MSOL_UNIT = 1e5, 2.31e15
G_CGS = 6.6743e-8
DENSITY_UNIT = MSOL_UNIT / KPC_UNIT**3  # Msun/kpc^3
# sqrt(G M / L) in km/s: 8.0285 sqrt(G[cgs] x density unit[Msun/kpc^3]) x L[kpc], the factor
# being sqrt(Msun / kpc^3 in g/cm^3) x kpc in km, as gasoline's units define it.
VEL_UNIT_KMS = 8.0285 * math.sqrt(G_CGS * DENSITY_UNIT) * KPC_UNIT
TIME_UNIT_GYR = KPC_UNIT / VEL_UNIT_KMS * 0.97781311  # kpc/(km/s) in Gyr


@pytest.fixture(scope="module")
def tipsy_snapshot(tmp_path_factory):
    """A cosmological tipsy snapshot (NIHAO's format) written by pynbody's TipsySnap writer in
    the code units of its .param file, with a star formation rate auxiliary array written by
    pynbody, loaded back by pynbody.load. Returns the loaded snapshot and the physical arrays
    the file's (float32) values stand for."""
    stars, gas = galaxy_arrays(n_disc=1200, n_satellite=300, n_gas=400, seed=7)
    folder = tmp_path_factory.mktemp("tipsy")
    hubble_unit = 10.0 * VEL_UNIT_KMS / KPC_UNIT  # pynbody: h = dHubble0 x this
    (folder / "run.param").write_text(
        f"dKpcUnit = {KPC_UNIT}\ndMsolUnit = {MSOL_UNIT}\nbComove = 1\n"
        f"dHubble0 = {H0 / 100 / hubble_unit!r}\ndOmega0 = {OMEGA_M}\ndLambda = {1 - OMEGA_M}\n")
    at = AT_CMPC * 1000 / KPC_UNIT  # comoving, in box units

    def code(values, unit):  # float32, as the file holds them
        return (np.asarray(values) / unit).astype(np.float32)

    rng = np.random.default_rng(8)
    t_birth_gyr = COSMOLOGY.age(1 / stars["birth_a"] - 1).value
    written = {
        "s_pos": code(at + stars["position_kpc"] / A_SNAP / KPC_UNIT, 1.0),
        "s_vel": code(stars["velocity_kms"] / A_SNAP, VEL_UNIT_KMS),
        "s_mass": code(stars["mass_msun"], MSOL_UNIT),
        "s_metals": code(stars["metallicity"], 1.0),
        "s_tform": code(t_birth_gyr, TIME_UNIT_GYR),
        "g_pos": code(at + gas["position_kpc"] / A_SNAP / KPC_UNIT, 1.0),
        "g_vel": code(gas["velocity_kms"] / A_SNAP, VEL_UNIT_KMS),
        "g_mass": code(gas["mass_msun"], MSOL_UNIT),
        "g_rho": code(gas["density_msun_per_kpc3"] * A_SNAP**3, DENSITY_UNIT),
        "g_metals": code(gas["metallicity"], 1.0),
    }
    new = pynbody.new(star=len(stars["mass_msun"]), gas=len(gas["mass_msun"]))
    new.properties["a"] = A_SNAP
    for key, values in written.items():
        family = new.s if key[0] == "s" else new.g
        family[key[2:]] = values
    new.g["temp"] = np.full(len(gas["mass_msun"]), 1e4, dtype=np.float32)
    path = folder / "galaxy.00512"
    new.write(fmt=pynbody.snapshot.tipsy.TipsySnap, filename=str(path), cosmological=True)
    loaded = pynbody.load(str(path))
    sfr = np.maximum(gas["sfr_msun_per_yr"], 0)
    loaded.g["sfr"] = pynbody.array.SimArray(sfr, "Msol yr^-1")
    loaded.g["sfr"].write()  # galaxy.00512.sfr, an auxiliary array as ChaNGa writes them
    expected = {
        "s_pos_kpc": written["s_pos"].astype(np.float64) * KPC_UNIT * A_SNAP,
        "s_vel_kms": written["s_vel"].astype(np.float64) * VEL_UNIT_KMS * A_SNAP,
        "s_mass_msun": written["s_mass"].astype(np.float64) * MSOL_UNIT,
        "s_age_gyr": T_SNAP_GYR - written["s_tform"].astype(np.float64) * TIME_UNIT_GYR,
        "s_metals": written["s_metals"].astype(np.float64),
        "g_mass_msun": written["g_mass"].astype(np.float64) * MSOL_UNIT,
        "g_rho": written["g_rho"].astype(np.float64) * DENSITY_UNIT / A_SNAP**3,
        "g_metals": written["g_metals"].astype(np.float64),
        "g_sfr": sfr,
    }
    return pynbody.load(str(path)), expected


def test_from_pynbody_matches_the_arrays_written(tipsy_snapshot):
    sim, expected = tipsy_snapshot
    galaxy = ifusim.Galaxy.from_pynbody(sim)
    assert galaxy.n_stars == len(expected["s_mass_msun"])
    assert galaxy.n_gas == len(expected["g_mass_msun"])
    assert galaxy.redshift == pytest.approx(1 / A_SNAP - 1, rel=1e-6)
    s, g = galaxy.stars, galaxy.gas
    # pynbody rounds its velocity and time units to 5 digits ("%.5g"): rtol 1e-4 below where
    # they enter; masses and densities are exact products held as float32 (rtol 1e-6).
    assert s["mass_msun"].sum(dtype=np.float64) == pytest.approx(
        expected["s_mass_msun"].sum(), rel=1e-6)
    # Ages: astropy's age of the Universe at a = 0.8 minus tform (pynbody's own integral of
    # the same cosmology there; its time unit rounded to 5 digits).
    assert expected["s_age_gyr"].min() > 0.1
    np.testing.assert_allclose(s["age_gyr"], expected["s_age_gyr"], rtol=1e-4, atol=1e-3)
    assert mass_weighted(s["age_gyr"], s["mass_msun"]) == pytest.approx(
        mass_weighted(expected["s_age_gyr"], expected["s_mass_msun"]), rel=1e-4)
    assert mass_weighted(s["metallicity"], s["mass_msun"]) == pytest.approx(
        mass_weighted(expected["s_metals"], expected["s_mass_msun"]), rel=1e-6)
    # Positions and velocities, comoving code units -> physical: centred by shrinking spheres
    # in the periodic box (100 Mpc comoving here), the arrays less that centre.
    centre = ifusim.find_centre(expected["s_pos_kpc"], expected["s_vel_kms"],
                                expected["s_mass_msun"], box_kpc=KPC_UNIT * A_SNAP)
    offsets = expected["s_pos_kpc"] - centre.position_kpc
    np.testing.assert_allclose(s["position_kpc"], offsets, rtol=0, atol=2e-3)
    np.testing.assert_allclose(s["velocity_kms"], expected["s_vel_kms"] - centre.velocity_kms,
                               rtol=0, atol=1e-4 * np.abs(expected["s_vel_kms"]).max())
    assert np.abs(centre.position_kpc - AT_CMPC * 1000 * A_SNAP).max() < 0.1
    # Gas: density a^-3 (comoving to physical), the auxiliary SFR array, in their units.
    assert g["mass_msun"].sum(dtype=np.float64) == pytest.approx(
        expected["g_mass_msun"].sum(), rel=1e-6)
    np.testing.assert_allclose(g["density_msun_per_kpc3"], expected["g_rho"], rtol=1e-5)
    np.testing.assert_allclose(g["sfr_msun_per_yr"], expected["g_sfr"], rtol=1e-6)
    assert mass_weighted(g["metallicity"], g["mass_msun"]) == pytest.approx(
        mass_weighted(expected["g_metals"], expected["g_mass_msun"]), rel=1e-6)


def test_from_pynbody_centred_by_pynbody_leaves_the_snapshot_as_it_was(tipsy_snapshot):
    sim, expected = tipsy_snapshot
    before = np.array(sim.s["pos"])
    ours = ifusim.Galaxy.from_pynbody(sim, read_gas=False)
    theirs = ifusim.Galaxy.from_pynbody(sim, centre="pynbody", read_gas=False)
    # pynbody's centring undone (its inverse translation rounds: 1e-9 of the box's unit).
    np.testing.assert_allclose(np.array(sim.s["pos"]), before, rtol=0, atol=1e-9)
    assert theirs.n_gas == 0 and theirs.n_stars == ours.n_stars
    # pynbody's shrinking spheres stop elsewhere than ours (its own sizes and counts): the two
    # centres agree to within the disc's core (0.5 kpc), far below the 6 kpc a centre of mass
    # would be off by.
    shift = np.mean(theirs.stars["position_kpc"] - ours.stars["position_kpc"], axis=0)
    assert np.abs(shift).max() < 0.5, shift
    with pytest.raises(ifusim.InputError, match="centre='middle'"):
        ifusim.Galaxy.from_pynbody(sim, centre="middle")


def test_from_swiftsimio_without_the_snapshots_cosmology(swift_snapshot, tmp_path):
    path, stars, _gas = swift_snapshot
    bare = tmp_path / "no_cosmology.hdf5"
    bare.write_bytes(path.read_bytes())
    with h5py.File(bare, "a") as f:
        del f["Cosmology"]
    data = swiftsimio.load(str(bare))
    # Birth scale factors without a cosmology are no ages: the error says what to pass.
    with pytest.raises(ifusim.InputError, match="cosmology="):
        ifusim.Galaxy.from_swiftsimio(data, read_gas=False)
    # The run's cosmology given by hand: the same ages as the snapshot's own gave.
    galaxy = ifusim.Galaxy.from_swiftsimio(data, read_gas=False, cosmology=COSMOLOGY)
    ages = T_SNAP_GYR - COSMOLOGY.age(1 / stars["birth_a"] - 1).value
    np.testing.assert_allclose(galaxy.stars["age_gyr"], ages, rtol=1e-5, atol=1e-5)
