// Orientation kernels: one source, compiled by orient_cpu.cpp and orient_cuda.cu.
namespace ifusim::IFUSIM_BACKEND_NS {

// The nine fixed-point sums of one star, or of many added: exact integer addition, so the same
// in any order.
struct InertiaTerms {
  std::int64_t t[9];
  IFUSIM_HD InertiaTerms operator+(const InertiaTerms& o) const {
    InertiaTerms sum;
    // Modulo 2^64, as the atomics add: the total is exact whatever the partial sums do.
    for (int k = 0; k < 9; ++k)
      sum.t[k] = static_cast<std::int64_t>(static_cast<std::uint64_t>(t[k]) +
                                           static_cast<std::uint64_t>(o.t[k]));
    return sum;
  }
};

// m (r^2 delta_ij - x_i x_j) (6 terms) and m (r x v) (3 terms) of a star within radius, else 0.
struct InertiaOfStar {
  const float *x, *y, *z, *vx, *vy, *vz, *mass;
  double radius_sq;
  double counts_per_unit;
  IFUSIM_HD InertiaTerms operator()(std::size_t i) const {
    InertiaTerms out{};
    const double px = x[i], py = y[i], pz = z[i], m = mass[i];
    const double r2 = px * px + py * py + pz * pz;
    if (r2 > radius_sq) return out;
    const double terms[9] = {m * (r2 - px * px),
                             m * (r2 - py * py),
                             m * (r2 - pz * pz),
                             -m * px * py,
                             -m * px * pz,
                             -m * py * pz,
                             m * (py * vz[i] - pz * vy[i]),
                             m * (pz * vx[i] - px * vz[i]),
                             m * (px * vy[i] - py * vx[i])};
    for (int t = 0; t < 9; ++t) out.t[t] = to_fixed(terms[t], counts_per_unit);
    return out;
  }
};

// Adds a device's nine totals into the partial sums its memory space's devices share.
struct AddInertiaTerms {
  InertiaTerms total;
  std::int64_t* sums;
  IFUSIM_HD void operator()(std::size_t t) const { atomic_add_fixed(sums + t, total.t[t]); }
};

// A reduction, not an atomic add per star and term: nine atomics that every star would hit
// serialise at 1e8 stars on a GPU.
void accumulate_inertia(const Device& device, Span<const float> x, Span<const float> y,
                        Span<const float> z, Span<const float> vx, Span<const float> vy,
                        Span<const float> vz, Span<const float> mass, double radius_kpc,
                        double counts_per_unit, Span<std::int64_t> sums) {
  const InertiaTerms total =
      transform_sum(device, x.size,
                    InertiaOfStar{x.data, y.data, z.data, vx.data, vy.data, vz.data, mass.data,
                                  radius_kpc * radius_kpc, counts_per_unit},
                    InertiaTerms{});
  parallel_for(device, 9, AddInertiaTerms{total, sums.data});
}

struct Rotate {
  RotationMatrix r;
  float *x, *y, *z;
  IFUSIM_HD void operator()(std::size_t i) const {
    const double a = x[i], b = y[i], c = z[i];
    x[i] = static_cast<float>(r.m[0] * a + r.m[1] * b + r.m[2] * c);
    y[i] = static_cast<float>(r.m[3] * a + r.m[4] * b + r.m[5] * c);
    z[i] = static_cast<float>(r.m[6] * a + r.m[7] * b + r.m[8] * c);
  }
};

void rotate_vectors(const Device& device, RotationMatrix rotation, Span<float> x, Span<float> y,
                    Span<float> z) {
  parallel_for(device, x.size, Rotate{rotation, x.data, y.data, z.data});
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
