#!/usr/bin/python3
"""Expected ingest numbers for an IllustrisTNG subhalo cutout, computed independently of ifusim.

Usage: /usr/bin/python3 tests/tools/tng_cutout_expected.py FILE.hdf5
Prints one JSON object. tests/test_tng_cutout.cpp holds the numbers this printed for
$IFUSIM_DATA_DIR/snapshots/tng100-1_snap078_subhalo_subsample.hdf5.

Conventions (the same as io/tng/tng_reader.h documents, implemented separately here with
h5py + numpy + astropy):
- physical cgs = value * a^a_scaling * h^h_scaling * to_cgs (to_cgs = 0: dimensionless);
  kpc = 3.085678e21 cm, Msun = 1.989e33 g (TNG's own unit constants).
- PartType4 rows with GFM_StellarFormationTime <= 0 are wind cells, dropped.
- centre: shrinking spheres on current stellar mass (Power et al. 2003), periodic box,
  shrink 2.5 % a step, stop before fewer than n_stop = min(1000, max(50, ceil(0.01 N))) stars.
- half-mass radius: smallest star distance at which the cumulative current mass reaches half.
- bulk velocity: current-mass-weighted mean peculiar velocity of the stars within it.
- ages: astropy FlatLambdaCDM age(z_snapshot) - age(z_formation), Tcmb0 = 0.
"""
import json
import math
import sys

import h5py
import numpy as np
from astropy import constants as const
from astropy.cosmology import FlatLambdaCDM

KPC_CM = 3.085678e21
MSUN_G = 1.989e33

f = h5py.File(sys.argv[1], "r")
hdr = f["Header"].attrs
a = float(np.ravel(hdr["Time"])[0])
h = float(np.ravel(hdr["HubbleParam"])[0])
box = float(np.ravel(hdr["BoxSize"])[0])
om = float(np.ravel(hdr["Omega0"])[0])


def physical_factor(ds):
    at = ds.attrs
    to_cgs = float(np.ravel(at["to_cgs"])[0])
    if to_cgs == 0:
        return 1.0
    return a ** float(np.ravel(at["a_scaling"])[0]) * h ** float(np.ravel(at["h_scaling"])[0]) * to_cgs


p4 = f["PartType4"]
sft = p4["GFM_StellarFormationTime"][()]
star = sft > 0
n_stars = int(star.sum())
n_wind = int((~star).sum())
mass = p4["Masses"][()][star] * physical_factor(p4["Masses"]) / MSUN_G
imass = p4["GFM_InitialMass"][()][star] * physical_factor(p4["GFM_InitialMass"]) / MSUN_G
metal = p4["GFM_Metallicity"][()][star]
x = p4["Coordinates"][()][star]  # comoving code units
vel = p4["Velocities"][()][star] * physical_factor(p4["Velocities"]) / 1e5  # peculiar km/s
pos_factor = physical_factor(p4["Coordinates"]) / KPC_CM  # code length -> physical kpc

# Shrinking spheres in the periodic box, in code units.
ref = x[0]
d = (x - ref + 0.5 * box) % box - 0.5 * box
c = (mass[:, None] * d).sum(0) / mass.sum()
r = np.sqrt(((d - c) ** 2).sum(1)).max()
n_stop = min(1000, max(50, math.ceil(0.01 * n_stars)))
n_stop = min(n_stop, n_stars)
while True:
    r_new = 0.975 * r
    inside = np.sqrt(((d - c) ** 2).sum(1)) <= r_new
    if inside.sum() < n_stop:
        break
    c = (mass[inside, None] * d[inside]).sum(0) / mass[inside].sum()
    r = r_new
centre_code = (ref + c) % box
centre_kpc = centre_code * pos_factor

rel = ((x - centre_code + 0.5 * box) % box - 0.5 * box) * pos_factor
dist = np.sqrt((rel ** 2).sum(1))
order = np.argsort(dist, kind="stable")
cum = np.cumsum(mass[order])
r_half = float(dist[order][np.searchsorted(cum, 0.5 * cum[-1])])
within = dist <= r_half
bulk = (mass[within, None] * vel[within]).sum(0) / mass[within].sum()

cosmo = FlatLambdaCDM(H0=100 * h, Om0=om, Tcmb0=0)
z_snap = 1 / a - 1
z_form = 1 / sft[star] - 1
age = (cosmo.age(z_snap) - cosmo.age(z_form)).to("Gyr").value

p0 = f["PartType0"]
gmass = p0["Masses"][()] * physical_factor(p0["Masses"]) / MSUN_G
u = p0["InternalEnergy"][()] * physical_factor(p0["InternalEnergy"])  # cm^2/s^2
xe = p0["ElectronAbundance"][()]
X_H = 0.76
mu = 4.0 / (1 + 3 * X_H + 4 * X_H * xe) * const.m_p.cgs.value
temp = (5.0 / 3.0 - 1) * u / const.k_B.cgs.value * mu
gdens = p0["Density"][()] * physical_factor(p0["Density"]) / MSUN_G * KPC_CM ** 3

first = int(np.argmax(star))  # first star row in the file
out = {
    "n_stars": n_stars,
    "n_wind_dropped": n_wind,
    "n_gas": int(gmass.size),
    "stellar_mass_msun": float(mass.sum()),
    "stellar_initial_mass_msun": float(imass.sum()),
    "gas_mass_msun": float(gmass.sum()),
    "center_kpc": [float(v) for v in centre_kpc],
    "stellar_half_mass_radius_kpc": r_half,
    "bulk_velocity_kms": [float(v) for v in bulk],
    "mass_weighted_age_gyr": float((mass * age).sum() / mass.sum()),
    "median_age_gyr": float(np.median(age)),
    "min_age_gyr": float(age.min()),
    "max_age_gyr": float(age.max()),
    "mass_weighted_metallicity": float((mass * metal).sum() / mass.sum()),
    "first_star_file_row": first,
    "first_star_position_kpc": [float(v) for v in rel[0]],
    "first_star_velocity_kms": [float(v) for v in vel[0] - bulk],
    "first_star_age_gyr": float(age[0]),
    "first_star_initial_mass_msun": float(imass[0]),
    "gas0_temperature_k": float(temp[0]),
    "gas0_density_msun_per_kpc3": float(gdens[0]),
    "gas_mass_weighted_temperature_k": float((gmass * temp).sum() / gmass.sum()),
}
print(json.dumps(out, indent=1))
