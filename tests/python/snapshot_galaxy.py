"""One small galaxy (stars and gas) and the files of each snapshot format that hold it.

The galaxy is drawn here in physical units (kpc, km/s, Msun); each writer stores it as its format
stores particles (comoving coordinates, h and a factors, the format's unit metadata), so that the
reader has to undo every factor to give the numbers back. The expectations tests compare against
(`expected_summary`) are computed from the drawn arrays with numpy and astropy, not by ifusim.

- EAGLE: the public particle data's layout and attributes (McAlpine et al. 2016, A&C 15, 72;
  The EAGLE team 2017, arXiv:1706.09899, table 3): cMpc/h, 1e10 Msun/h, Velocity as sqrt(a) *
  peculiar, "CGSConversionFactor", "aexp-scale-exponent", "h-scale-exponent" on every dataset,
  per-particle GroupNumber / SubGroupNumber.
- GIZMO (FIRE public data; GIZMO users guide, "Snapshot & initial condition files"): no unit
  attributes; ckpc/h, 1e10 Msun/h, km/s * sqrt(a) as the header's unit system says;
  StellarFormationTime a scale factor; Metallicity (N, 11) with the total in column 0.
- SWIFT: written by swiftsimio's own Writer in a separate interpreter (write_swift_snapshot.py;
  swiftsimio needs numpy 2, the package's environment has Debian's numpy 1).
"""

import numpy as np

H = 0.6777
OMEGA_M = 0.307
SCALE_FACTOR = 0.8
BOX_CMPC_H = 5.0  # comoving box side, cMpc/h
CENTRE_CKPC_H = np.array([2100.0, 2300.0, 2500.0])  # the galaxy's centre in the box, ckpc/h
BULK_VELOCITY_KMS = np.array([120.0, -40.0, 15.0])  # peculiar


def cosmology():
    from astropy.cosmology import FlatLambdaCDM

    return FlatLambdaCDM(H0=100 * H, Om0=OMEGA_M, Tcmb0=0)


def draw(n_stars=600, n_gas=300, seed=7):
    """The galaxy in physical units, centred at the origin with no bulk motion, plus the
    formation scale factors; a second, separate clump of stars ("other") 600 ckpc/h away that
    a region, id or group selection must leave out."""
    rng = np.random.default_rng(seed)
    a = SCALE_FACTOR

    def part(n, scale_kpc):
        return {
            "position_kpc": rng.normal(0.0, scale_kpc, (n, 3)),
            "velocity_kms": rng.normal(0.0, 60.0, (n, 3)),
            "mass_msun": rng.uniform(2e5, 8e5, n),
            "metallicity": rng.uniform(0.001, 0.03, n),
        }

    stars = part(n_stars, 3.0)
    stars["initial_mass_msun"] = stars["mass_msun"] * rng.uniform(1.2, 1.6, n_stars)
    stars["formation_a"] = rng.uniform(0.15, a, n_stars)
    gas = part(n_gas, 5.0)
    gas["sfr_msun_per_yr"] = rng.uniform(0.0, 0.01, n_gas)
    other = part(200, 2.0)
    other["initial_mass_msun"] = other["mass_msun"] * 1.3
    other["formation_a"] = rng.uniform(0.15, a, 200)
    return stars, gas, other


def comoving_ckpc_h(position_kpc, offset_ckpc_h=0.0):
    """Physical kpc about the galaxy -> comoving box position in ckpc/h."""
    return (CENTRE_CKPC_H + offset_ckpc_h) + position_kpc / SCALE_FACTOR * H


def expected_summary(stars):
    """What `ifusim inspect` must report, computed here with numpy and astropy."""
    cosmo = cosmology()
    z = 1.0 / SCALE_FACTOR - 1.0
    m = stars["mass_msun"]
    age = cosmo.age(z).value - cosmo.age(1.0 / stars["formation_a"] - 1.0).value
    return {
        "n_stars": len(m),
        "stellar_mass_msun": m.sum(),
        "stellar_initial_mass_msun": stars["initial_mass_msun"].sum(),
        "redshift": z,
        "mass_weighted_age_gyr": np.sum(m * age) / m.sum(),
        "mass_weighted_metallicity": np.sum(m * stars["metallicity"]) / m.sum(),
    }


MPC_CM = 3.0856775814913673e24
MSUN_G = 1.98841e33


def write_eagle(path, stars, gas, other):
    """An EAGLE snapshot file of the galaxy (GroupNumber 3, SubGroupNumber 0), the other clump
    (GroupNumber 5) and the gas (GroupNumber 3), as the EAGLE public release stores them."""
    import h5py

    a = SCALE_FACTOR
    with h5py.File(path, "w") as f:
        hdr = f.create_group("Header")
        hdr.attrs["BoxSize"] = BOX_CMPC_H
        hdr.attrs["ExpansionFactor"] = a
        hdr.attrs["Time"] = a
        hdr.attrs["Redshift"] = 1.0 / a - 1.0
        hdr.attrs["HubbleParam"] = H
        hdr.attrs["Omega0"] = OMEGA_M
        hdr.attrs["OmegaLambda"] = 1.0 - OMEGA_M
        hdr.attrs["OmegaBaryon"] = 0.04825
        hdr.attrs["NumFilesPerSnapshot"] = 1

        def dataset(g, name, values, cgs, aexp, hexp, dtype="f4"):
            d = g.create_dataset(name, data=np.asarray(values, dtype=dtype))
            d.attrs["CGSConversionFactor"] = cgs
            d.attrs["aexp-scale-exponent"] = aexp
            d.attrs["h-scale-exponent"] = hexp
            d.attrs["VarDescription"] = name

        def write_type(g, sets, groups, star):
            pos = np.concatenate([comoving_ckpc_h(s["position_kpc"], off) for s, off in sets]) / 1e3
            vel = np.concatenate([s["velocity_kms"] + BULK_VELOCITY_KMS for s, _ in sets])
            mass = np.concatenate([s["mass_msun"] for s, _ in sets])
            dataset(g, "Coordinates", pos, MPC_CM, 1.0, -1.0, "f8")
            # Velocity = peculiar / sqrt(a): aexp-scale-exponent 0.5
            dataset(g, "Velocity", vel / np.sqrt(a), 1e5, 0.5, 0.0)
            dataset(g, "Mass", mass / 1e10 * H, 1e10 * MSUN_G, 0.0, -1.0)
            dataset(g, "SmoothedMetallicity", np.concatenate([s["metallicity"] for s, _ in sets]),
                    1.0, 0.0, 0.0)
            g.create_dataset("GroupNumber", data=np.concatenate(groups).astype("i4"))
            g.create_dataset("SubGroupNumber", data=np.zeros(len(mass), "i4"))
            first_id = 1 if star else 10**6
            g.create_dataset("ParticleIDs", data=np.arange(len(mass), dtype="i8") + first_id)
            if star:
                dataset(g, "InitialMass",
                        np.concatenate([s["initial_mass_msun"] for s, _ in sets]) / 1e10 * H,
                        1e10 * MSUN_G, 0.0, -1.0)
                dataset(g, "StellarFormationTime",
                        np.concatenate([s["formation_a"] for s, _ in sets]), 1.0, 0.0, 0.0)
            else:
                # Msun/yr in g/s (EAGLE's CGSConversionFactor of StarFormationRate)
                sfr = np.concatenate([s["sfr_msun_per_yr"] for s, _ in sets])
                dataset(g, "StarFormationRate", sfr, MSUN_G / (365.25 * 86400), 0.0, 0.0)

        write_type(f.create_group("PartType4"), [(stars, 0.0), (other, 600.0)],
                   [np.full(len(stars["mass_msun"]), 3), np.full(len(other["mass_msun"]), 5)], True)
        write_type(f.create_group("PartType0"), [(gas, 0.0)], [np.full(len(gas["mass_msun"]), 3)],
                   False)


GIZMO_UNIT_LENGTH_CM = 3.085678e21
GIZMO_UNIT_MASS_G = 1.989e43


def write_gizmo(path, stars, gas):
    """A GIZMO snapshot file (FIRE public data layout) of the galaxy."""
    import h5py

    a = SCALE_FACTOR
    with h5py.File(path, "w") as f:
        hdr = f.create_group("Header")
        hdr.attrs["BoxSize"] = BOX_CMPC_H * 1e3
        hdr.attrs["Time"] = a
        hdr.attrs["Redshift"] = 1.0 / a - 1.0
        hdr.attrs["HubbleParam"] = H
        hdr.attrs["Omega_Matter"] = OMEGA_M
        hdr.attrs["Omega_Lambda"] = 1.0 - OMEGA_M
        hdr.attrs["NumFilesPerSnapshot"] = 1
        hdr.attrs["NumPart_ThisFile"] = np.array([len(gas["mass_msun"]), 0, 0, 0,
                                                  len(stars["mass_msun"]), 0], "i4")
        hdr.attrs["ComovingIntegrationOn"] = 1
        # GIZMO's unit system, as FIRE's public snapshots write it (1 ckpc/h, 1e10 Msun/h, km/s)
        hdr.attrs["UnitLength_In_CGS"] = GIZMO_UNIT_LENGTH_CM
        hdr.attrs["UnitMass_In_CGS"] = GIZMO_UNIT_MASS_G
        hdr.attrs["UnitVelocity_In_CGS"] = 1e5

        def write_type(g, s, star):
            n = len(s["mass_msun"])
            g.create_dataset("Coordinates", data=comoving_ckpc_h(s["position_kpc"]))
            stored_velocity = (s["velocity_kms"] + BULK_VELOCITY_KMS) / np.sqrt(a)
            g.create_dataset("Velocities", data=stored_velocity.astype("f4"))
            # masses in the unit system's 1.989e43 g / h: the drawn Msun (1.98841e33 g) rescaled
            g.create_dataset("Masses",
                             data=(s["mass_msun"] * MSUN_G / GIZMO_UNIT_MASS_G * H).astype("f4"))
            metals = np.zeros((n, 11), "f4")
            metals[:, 0] = s["metallicity"]
            metals[:, 1] = 0.28  # He: a column the reader must not take
            g.create_dataset("Metallicity", data=metals)
            g.create_dataset("ParticleIDs", data=np.arange(n, dtype="u4") + 1)
            if star:
                g.create_dataset("StellarFormationTime", data=s["formation_a"].astype("f4"))
            else:
                g.create_dataset("StarFormationRate", data=s["sfr_msun_per_yr"].astype("f4"))

        write_type(f.create_group("PartType4"), stars, True)
        write_type(f.create_group("PartType0"), gas, False)


def split_into_chunks(path, base, n):
    """The snapshot file `path` as n chunk files base.0.hdf5 ... base.(n-1).hdf5, as multi-file
    snapshots are written: each holds a contiguous share of every particle type, the Header
    (NumFilesPerSnapshot = n) and the datasets' attributes. Returns the chunk paths."""
    import h5py

    paths = [f"{base}.{k}.hdf5" for k in range(n)]
    with h5py.File(path, "r") as src:
        for k, out in enumerate(paths):
            with h5py.File(out, "w") as dst:
                src.copy("Header", dst)
                dst["Header"].attrs["NumFilesPerSnapshot"] = n
                for name in src:
                    if not name.startswith("PartType"):
                        if name != "Header":
                            src.copy(name, dst)
                        continue
                    group = dst.create_group(name)
                    for field, d in src[name].items():
                        rows = d.shape[0]
                        lo, hi = rows * k // n, rows * (k + 1) // n
                        out_d = group.create_dataset(field, data=d[lo:hi])
                        for key, value in d.attrs.items():
                            out_d.attrs[key] = value
    return paths
