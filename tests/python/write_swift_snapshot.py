"""Writes the galaxy of snapshot_galaxy.py as a SWIFT snapshot with swiftsimio's own Writer.

Run by a Python that has swiftsimio (tests/python/test_snapshot_formats.py runs it in a
separate interpreter): `python write_swift_snapshot.py OUT.hdf5`. The Writer writes the
datasets SWIFT's initial conditions need (Coordinates, Velocities, Masses, SmoothingLengths,
ParticleIDs, InternalEnergy) with SWIFT's unit attributes; the datasets a snapshot adds
(InitialMasses, BirthScaleFactors, MetalMassFractions, StarFormationRates) and the Cosmology
group are added with the same attributes, as SWIFT writes them (SWIFT docs, "Snapshots").
"""

import sys
from pathlib import Path

import h5py
import numpy as np
import unyt
from swiftsimio import Writer, cosmo_array
from swiftsimio.metadata.writer.unit_systems import cosmo_units

PLAIN = "Conversion factor to CGS (not including cosmological corrections)"

sys.path.insert(0, str(Path(__file__).resolve().parent))
import snapshot_galaxy as G  # noqa: E402


def main(out):
    stars, gas, _ = G.draw()
    a = G.SCALE_FACTOR

    def ca(v, u, exponent):
        return cosmo_array(v, u, comoving=True, scale_factor=a, scale_exponent=exponent)

    # SWIFT has no h: comoving Mpc, 1e10 Msun, peculiar km/s (cosmo_units).
    def centre_cmpc(p):
        return G.comoving_ckpc_h(p) / G.H / 1e3

    w = Writer(unit_system=cosmo_units,
               boxsize=ca(np.full(3, G.BOX_CMPC_H / G.H), unyt.Mpc, 1), scale_factor=a)
    for part, s in ((w.stars, stars), (w.gas, gas)):
        n = len(s["mass_msun"])
        part.coordinates = ca(centre_cmpc(s["position_kpc"]), unyt.Mpc, 1)
        part.velocities = ca(s["velocity_kms"] + G.BULK_VELOCITY_KMS, unyt.km / unyt.s, 0)
        part.masses = ca(s["mass_msun"] / 1e10, 1e10 * unyt.Msun, 0)
        part.smoothing_lengths = ca(np.full(n, 0.4e-3 / a), unyt.Mpc, 1)
    w.gas.internal_energy = ca(np.full(len(gas["mass_msun"]), 100.0), unyt.km**2 / unyt.s**2, 0)
    w.write(out)

    with h5py.File(out, "r+") as f:
        # swiftsimio 12.4's Writer writes "a-scale exponent" 1 for a field of scale exponent 0
        # (getattr(expr, "exp", 1.0) of a**0); its own "Conversion factor to physical CGS
        # (including cosmological corrections)" says a^0. Write what SWIFT writes for them.
        for group in ("PartType4", "PartType0"):
            for name in ("Masses", "Velocities", "InternalEnergy"):
                if name not in f[group]:
                    continue
                d = f[group][name]
                plain = d.attrs[PLAIN]
                physical = d.attrs["Conversion factor to physical CGS (including cosmological "
                                   "corrections)"]
                if np.allclose(plain, physical):
                    d.attrs["a-scale exponent"] = [0.0]
        msun_cgs = f["PartType4/Masses"].attrs[PLAIN]

        def add(group, name, values, cgs, a_exp):
            d = f[group].create_dataset(name, data=values)
            d.attrs[PLAIN] = [cgs]
            d.attrs["Conversion factor to physical CGS (including cosmological corrections)"] = [
                cgs * a**a_exp]
            d.attrs["a-scale exponent"] = [a_exp]
            d.attrs["h-scale exponent"] = [0.0]

        add("PartType4", "InitialMasses", (stars["initial_mass_msun"] / 1e10).astype("f4"),
            msun_cgs[0], 0.0)
        add("PartType4", "BirthScaleFactors", stars["formation_a"].astype("f4"), 1.0, 0.0)
        add("PartType4", "MetalMassFractions", stars["metallicity"].astype("f4"), 1.0, 0.0)
        add("PartType0", "MetalMassFractions", gas["metallicity"].astype("f4"), 1.0, 0.0)
        # Msun/yr in the internal units' mass / time (SWIFT writes SFRs in U_M / U_t)
        unit_time_s = f["Units"].attrs["Unit time in cgs (U_t)"][0]
        sfr = gas["sfr_msun_per_yr"] * G.MSUN_G / (365.25 * 86400) / (msun_cgs[0] / unit_time_s)
        sfr[:10] = -0.5  # SWIFT: minus the scale factor of the last star formation
        add("PartType0", "StarFormationRates", sfr.astype("f4"), msun_cgs[0] / unit_time_s, 0.0)
        f["Header"].attrs["Redshift"] = [1.0 / a - 1.0]
        f["Header"].attrs["Code"] = "SWIFT"
        c = f.create_group("Cosmology")
        c.attrs["h"] = [G.H]
        c.attrs["Omega_m"] = [G.OMEGA_M]
        c.attrs["Omega_lambda"] = [1.0 - G.OMEGA_M]
        c.attrs["Omega_b"] = [0.0482]
        c.attrs["Scale-factor"] = [a]
        c.attrs["Redshift"] = [1.0 / a - 1.0]
        c.attrs["Cosmological run"] = [1]


if __name__ == "__main__":
    main(sys.argv[1])
