// Compiled kernels of the T-GCN samplers (Wang et al., "streaming T-GCN", §2.3-§3, Alg. 2-5): SIS (the
// sum tree of Alg. 3), ITS (reject-and-redraw and rebuild-the-CDF) and BRS (C-SAW's bipartite region
// search, Alg. 2), node-wise / layer-wise sampling without replacement (Alg. 4), frontier subgraph
// sampling (Alg. 5) and the persistent per-vertex sum trees of the temporal `sis` strategy.
//
// Every function mirrors, operation for operation, the pure-Python reference in sumtree.py / wor.py /
// forest.py: the same random numbers give the same indices, and the same element-touch counts (one
// read or write of a weight, tree node, CDF entry or selection flag) are returned, so the counts do
// not depend on which backend ran. Plain C ABI, loaded with ctypes (native.py); no Python headers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

const uint64_t GAMMA = 0x9E3779B97F4A7C15ULL;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniforms in [0, 1): from a caller's buffer (common random numbers) or from splitmix64 seeded per
// problem (stream r starts at mix64(seed + r + GAMMA), as in the Python reference).
struct Uniforms {
  const double* buf = nullptr;
  int64_t len = 0, pos = 0;
  uint64_t state = 0;
  bool seeded = false, exhausted = false;

  static Uniforms from_buffer(const double* b, int64_t n) {
    Uniforms u;
    u.buf = b;
    u.len = n;
    return u;
  }
  static Uniforms from_seed(uint64_t seed, uint64_t stream) {
    Uniforms u;
    u.seeded = true;
    u.state = mix64(seed + stream + GAMMA);
    return u;
  }
  double next() {
    if (seeded) {
      state += GAMMA;
      return static_cast<double>(mix64(state) >> 11) * 0x1.0p-53;
    }
    if (pos < len) return buf[pos++];
    exhausted = true;
    return 0.0;
  }
};

// g in [0, total): integer draws floor(u * total) for integer weights (Alg. 3 with integer sums), else u * total.
double draw(Uniforms& u, double total, bool integer) {
  double g = u.next() * total;
  if (integer) {
    g = std::floor(g);
    if (g > total - 1) g = total - 1;
  } else if (g >= total) {
    g = std::nextafter(total, 0.0);
  }
  return g;
}

// Alg. 3 as an implicit array: root 1, children 2i and 2i+1, leaves cap..2cap-1 (cap a power of two).
struct SumTree {
  std::vector<double> t;
  int64_t cap = 1, depth = 0;

  void build(const double* w, int64_t n, int64_t& touches) {
    cap = 1;
    depth = 0;
    while (cap < n) {
      cap <<= 1;
      ++depth;
    }
    t.assign(2 * cap, 0.0);
    for (int64_t i = 0; i < n; ++i) t[cap + i] = w[i];
    for (int64_t i = cap - 1; i >= 1; --i) t[i] = t[2 * i] + t[2 * i + 1];
    touches += 2 * n + 3 * (cap - 1);
  }
  double total() const { return t[1]; }

  // Alg. 3 Search with its range fixed: g in [0, total), go right iff g >= left.sum. The guards never
  // enter an empty subtree, so rounding in g - left.sum cannot reach a zero-weight leaf.
  int64_t search(double g, int64_t& touches) const {
    int64_t i = 1;
    for (int64_t level = 0; level < depth; ++level) {
      double left = t[2 * i], right = t[2 * i + 1];
      if ((g >= left && right > 0) || left <= 0) {
        g -= left;
        i = 2 * i + 1;
      } else {
        i = 2 * i;
      }
    }
    touches += 2 * depth;
    return i - cap;
  }

  // Alg. 3 Modify with the leaf's return restored: set the leaf, recompute its ancestors only.
  void modify(int64_t pos, double value, int64_t& touches) {
    int64_t i = cap + pos;
    t[i] = value;
    for (i >>= 1; i >= 1; i >>= 1) t[i] = t[2 * i] + t[2 * i + 1];
    touches += 1 + 3 * depth;
  }
};

// First index i in [a, b) with cdf[i] > g (upper bound). If none (only by rounding at the top of the
// range), the last positive weight in [a, b), or -1 if there is none: never a zero-weight item.
int64_t upper_bound(const std::vector<double>& cdf, int64_t a, int64_t b, double g, int64_t& touches) {
  int64_t lo = a, hi = b;
  while (lo < hi) {
    int64_t mid = (lo + hi) >> 1;
    ++touches;
    if (cdf[mid] > g) hi = mid; else lo = mid + 1;
  }
  if (lo < b) return lo;
  for (int64_t i = b - 1; i >= a; --i) {  // rounding only: g at the very top of the range
    touches += 2;
    double below = i > 0 ? cdf[i - 1] : 0.0;
    if (cdf[i] > below) return i;
  }
  return -1;
}

int64_t prefix_cdf(const double* w, int64_t n, std::vector<double>& cdf, int64_t& touches) {
  cdf.resize(n);
  double run = 0.0;
  int64_t positive = 0;
  for (int64_t i = 0; i < n; ++i) {
    run += w[i];
    cdf[i] = run;
    positive += w[i] > 0;
  }
  touches += 2 * n;
  return positive;
}

enum Method { SIS = 0, ITS_REJECT = 1, ITS_REBUILD = 2, BRS = 3 };

struct Scratch {
  SumTree tree;
  std::vector<double> cdf, current;
  std::vector<char> selected;
};

// Sample(V, n) of Alg. 4 without replacement: up to `draws` indices of w[0..n) into out (-1 padded).
// Returns false if the uniform buffer ran out (the caller retries with a larger one).
bool sample_wor(int method, const double* w, int64_t n, int64_t draws, bool integer, Uniforms& u, int64_t* out,
                int64_t& touches, Scratch& s) {
  for (int64_t j = 0; j < draws; ++j) out[j] = -1;
  if (method == SIS) {
    s.tree.build(w, n, touches);
    for (int64_t j = 0; j < draws; ++j) {
      double total = s.tree.total();
      ++touches;
      if (total <= 0) break;
      double g = draw(u, total, integer);
      if (u.exhausted) return false;
      int64_t leaf = s.tree.search(g, touches);
      out[j] = leaf;
      s.tree.modify(leaf, 0.0, touches);  // without replacement: "subtract Weight(e_x)"
    }
    return true;
  }
  if (method == ITS_REBUILD) {
    s.current.assign(w, w + n);
    touches += 2 * n;
    for (int64_t j = 0; j < draws; ++j) {
      prefix_cdf(s.current.data(), n, s.cdf, touches);
      double total = n ? s.cdf[n - 1] : 0.0;
      if (total <= 0) break;
      double g = draw(u, total, integer);
      if (u.exhausted) return false;
      int64_t i = upper_bound(s.cdf, 0, n, g, touches);
      out[j] = i;
      s.current[i] = 0.0;
      ++touches;
    }
    return true;
  }
  // ITS-reject and BRS share one CDF over all weights and a selection flag per item.
  int64_t positive = prefix_cdf(w, n, s.cdf, touches);
  double total = n ? s.cdf[n - 1] : 0.0;
  s.selected.assign(n, 0);
  int64_t need = draws < positive ? draws : positive;
  for (int64_t got = 0; got < need;) {
    double g = draw(u, total, integer);
    if (u.exhausted) return false;
    int64_t i = upper_bound(s.cdf, 0, n, g, touches);
    ++touches;
    if (method == BRS) {
      while (s.selected[i]) {  // Alg. 2: redraw in the bipartite region around the selected one
        double lo = i > 0 ? s.cdf[i - 1] : 0.0, hi = s.cdf[i];
        touches += 2;
        double r = draw(u, total - (hi - lo), integer);
        if (u.exhausted) return false;
        int64_t j = -1;  // stays -1 only by rounding: then draw again around the same item
        if (r < lo) j = upper_bound(s.cdf, 0, i, r, touches);
        else if (i + 1 < n) j = upper_bound(s.cdf, i + 1, n, r + (hi - lo), touches);
        if (j >= 0) i = j;
        ++touches;
      }
    } else if (s.selected[i]) {
      continue;  // ITS (§2.4): already selected, draw again
    }
    s.selected[i] = 1;
    ++touches;
    out[got++] = i;
  }
  return true;
}

// ---------------------------------------------------------------- temporal: one growable tree per vertex
// Leaf p of vertex v is the p-th event of v's time-sorted adjacency (T-CSR position). Weights are 1, or
// exp(alpha (t_e - t_ref(v))) for time decay exp(-alpha (t_q - t_e)) (the factor in t_q cancels when the
// query normalises); t_ref(v) is re-based to the appended time when the exponent exceeds 600.
struct VertexTree {
  std::vector<double> t, times;
  int64_t cap = 0, depth = 0;
  double tref = 0.0;
  bool has_ref = false;
};

struct Forest {
  double alpha;
  std::vector<VertexTree> trees;
};

void rebuild(VertexTree& v, int64_t& touches) {
  for (int64_t i = v.cap - 1; i >= 1; --i) v.t[i] = v.t[2 * i] + v.t[2 * i + 1];
  touches += 3 * (v.cap - 1);
}

void grow(VertexTree& v, int64_t need, int64_t& touches) {
  int64_t cap = v.cap ? v.cap : 1, depth = v.depth;
  while (cap < need) {
    cap <<= 1;
    ++depth;
  }
  std::vector<double> t(2 * cap, 0.0);
  for (int64_t i = 0; i < v.cap; ++i) t[cap + i] = v.t[v.cap + i];
  touches += 2 * v.cap;
  v.t.swap(t);
  v.times.resize(cap, NAN);
  v.cap = cap;
  v.depth = depth;
  rebuild(v, touches);
}

void set_leaf(VertexTree& v, int64_t pos, double value, int64_t& touches) {
  int64_t i = v.cap + pos;
  v.t[i] = value;
  for (i >>= 1; i >= 1; i >>= 1) v.t[i] = v.t[2 * i] + v.t[2 * i + 1];
  touches += 1 + 3 * v.depth;
}

// Sum of leaves [0, k) in O(log cap).
double prefix_sum(const VertexTree& v, int64_t k, int64_t& touches) {
  if (k >= v.cap) {
    ++touches;
    return v.t[1];
  }
  double sum = 0.0;
  int64_t node = 1, lo = 0, size = v.cap;
  while (size > 1) {
    int64_t half = size >> 1;
    if (k >= lo + half) {
      sum += v.t[2 * node];
      ++touches;
      node = 2 * node + 1;
      lo += half;
    } else {
      node = 2 * node;
    }
    size = half;
  }
  if (lo < k) {
    sum += v.t[node];
    ++touches;
  }
  return sum;
}

// Search restricted to leaves [0, k): never enters a subtree that starts at or after k, nor an empty one.
int64_t search_prefix(const VertexTree& v, double g, int64_t k, int64_t& touches) {
  int64_t node = 1, lo = 0, size = v.cap;
  while (size > 1) {
    int64_t half = size >> 1;
    double left = v.t[2 * node], right = v.t[2 * node + 1];
    bool right_allowed = lo + half < k && right > 0;
    if ((g >= left && right_allowed) || (left <= 0 && right_allowed)) {
      g -= left;
      node = 2 * node + 1;
      lo += half;
    } else {
      node = 2 * node;
    }
    size = half;
  }
  touches += 2 * v.depth;
  if (v.t[v.cap + lo] > 0) return lo;
  // Rounding only (g - left.sum overshooting at the boundary path): the nearest positive leaf below k.
  for (int64_t i = k - 1; i >= 0; --i) {
    ++touches;
    if (v.t[v.cap + i] > 0) return i;
  }
  return lo;
}

}  // namespace

extern "C" {

// Independent Sample(V_r, draws_r) problems; weights of problem r are w[offsets[r]:offsets[r+1]], its
// indices go to out[out_offsets[r]:...]. uniforms: problems x budget (or null with a seed). Returns 0, or
// -(r + 1) if problem r exhausted its budget. touches[r] receives problem r's element touches.
int64_t sis_sample_wor(int method, int64_t problems, const int64_t* offsets, const double* w, const int64_t* draws,
                       const int64_t* out_offsets, int integer, const double* uniforms, int64_t budget,
                       uint64_t seed, int64_t* out, int64_t* touches) {
  Scratch scratch;
  for (int64_t r = 0; r < problems; ++r) {
    Uniforms u = uniforms ? Uniforms::from_buffer(uniforms + r * budget, budget) : Uniforms::from_seed(seed, r);
    touches[r] = 0;
    if (!sample_wor(method, w + offsets[r], offsets[r + 1] - offsets[r], draws[r], integer != 0, u,
                    out + out_offsets[r], touches[r], scratch))
      return -(r + 1);
  }
  return 0;
}

// Alg. 5 (frontier subgraph sampling), `reps` times from the given frontiers (reps x m). Step k of
// repetition r: pick slot L with probability deg(FS[L]) / sum (SIS: the tree; BRS: the frontier's CDF
// recomputed after every replacement, as C-SAW re-calculates the selection probability), record
// (L, FS[L]), replace FS[L] by a uniform neighbour. Two uniforms per step. Unused steps are -1.
int64_t sis_frontier(int method, const int64_t* indptr, const int64_t* indices, const int64_t* frontiers, int64_t reps,
                     int64_t m, int64_t steps, const double* uniforms, int64_t budget, uint64_t seed, int64_t* slots,
                     int64_t* picked, int64_t* touches) {
  SumTree tree;
  std::vector<double> weights(m), cdf;
  std::vector<int64_t> fs(m);
  for (int64_t r = 0; r < reps; ++r) {
    Uniforms u = uniforms ? Uniforms::from_buffer(uniforms + r * budget, budget) : Uniforms::from_seed(seed, r);
    int64_t& touched = touches[r];
    touched = 0;
    for (int64_t i = 0; i < m; ++i) {
      fs[i] = frontiers[r * m + i];
      weights[i] = static_cast<double>(indptr[fs[i] + 1] - indptr[fs[i]]);
    }
    touched += 3 * m;
    if (method == SIS) tree.build(weights.data(), m, touched);
    for (int64_t k = 0; k < steps; ++k) {
      slots[r * steps + k] = picked[r * steps + k] = -1;
    }
    for (int64_t k = 0; k < steps; ++k) {
      int64_t slot;
      if (method == SIS) {
        double total = tree.total();
        ++touched;
        if (total <= 0) break;
        double g = draw(u, total, true);
        slot = tree.search(g, touched);
      } else {
        prefix_cdf(weights.data(), m, cdf, touched);
        double total = m ? cdf[m - 1] : 0.0;
        if (total <= 0) break;
        double g = draw(u, total, true);
        slot = upper_bound(cdf, 0, m, g, touched);
      }
      int64_t v = fs[slot];
      int64_t degree = indptr[v + 1] - indptr[v];
      double x = std::floor(u.next() * static_cast<double>(degree));
      if (u.exhausted) return -(r + 1);
      int64_t j = static_cast<int64_t>(x) < degree ? static_cast<int64_t>(x) : degree - 1;
      int64_t next = indices[indptr[v] + j];
      double next_degree = static_cast<double>(indptr[next + 1] - indptr[next]);
      touched += 4;
      slots[r * steps + k] = slot;
      picked[r * steps + k] = v;
      fs[slot] = next;
      weights[slot] = next_degree;
      touched += 2;
      if (method == SIS) tree.modify(slot, next_degree, touched);
    }
  }
  return 0;
}

// Alg. 4 end to end on a static CSR with unit weights and integer draws, one splitmix64 stream per root
// (node-wise) or per batch of roots (layer-wise). Node-wise: every vertex of the previous layer samples
// ceil(fraction * degree) of its neighbour slots; the layer is the set of their neighbours. Layer-wise:
// one Sample over the set of the previous layer's neighbours, ceil(fraction * |set|) of them.
// layer_counts[l] += |layer l|; checksum: order-free sum over (root or batch, layer, vertex).
int64_t sis_multilayer(int method, int layerwise, int64_t num_vertices, const int64_t* indptr, const int64_t* indices,
                       const int64_t* roots, int64_t nroots, int64_t batch, int64_t depth, double fraction,
                       uint64_t seed, int64_t* layer_counts, uint64_t* checksum, int64_t* touches) {
  Scratch scratch;
  std::vector<int64_t> stamp(num_vertices, -1), frontier, next, picks;
  std::vector<double> ones;
  int64_t stamp_id = 0;
  *touches = 0;
  *checksum = 0;
  int64_t groups = layerwise ? (nroots + batch - 1) / batch : nroots;
  for (int64_t gidx = 0; gidx < groups; ++gidx) {
    Uniforms u = Uniforms::from_seed(seed, gidx);
    frontier.clear();
    int64_t a = layerwise ? gidx * batch : gidx, b = layerwise ? std::min(nroots, a + batch) : a + 1;
    ++stamp_id;
    for (int64_t i = a; i < b; ++i)
      if (stamp[roots[i]] != stamp_id) {
        stamp[roots[i]] = stamp_id;
        frontier.push_back(roots[i]);
      }
    for (int64_t layer = 0; layer < depth; ++layer) {
      ++stamp_id;
      next.clear();
      if (!layerwise) {
        for (int64_t v : frontier) {
          int64_t degree = indptr[v + 1] - indptr[v];
          int64_t n = static_cast<int64_t>(std::ceil(fraction * static_cast<double>(degree)));
          ones.assign(degree, 1.0);
          picks.resize(n);
          if (!sample_wor(method, ones.data(), degree, n, true, u, picks.data(), *touches, scratch)) return -1;
          for (int64_t p : picks) {
            int64_t x = indices[indptr[v] + p];
            if (stamp[x] != stamp_id) {
              stamp[x] = stamp_id;
              next.push_back(x);
            }
          }
        }
      } else {
        std::vector<int64_t> pool;
        for (int64_t v : frontier)
          for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e)
            if (stamp[indices[e]] != stamp_id) {
              stamp[indices[e]] = stamp_id;
              pool.push_back(indices[e]);
            }
        int64_t n = static_cast<int64_t>(std::ceil(fraction * static_cast<double>(pool.size())));
        ones.assign(pool.size(), 1.0);
        picks.resize(n);
        if (!sample_wor(method, ones.data(), static_cast<int64_t>(pool.size()), n, true, u, picks.data(), *touches,
                        scratch))
          return -1;
        for (int64_t p : picks) next.push_back(pool[p]);
      }
      layer_counts[layer] += static_cast<int64_t>(next.size());
      for (int64_t x : next)
        *checksum += mix64(static_cast<uint64_t>(x) * 1000003ULL + static_cast<uint64_t>(layer) * 7919ULL +
                           static_cast<uint64_t>(gidx) * 104729ULL);
      frontier.swap(next);
    }
  }
  return 0;
}

void* sis_forest_new(int64_t num_vertices, double alpha) {
  Forest* f = new Forest;
  f->alpha = alpha;
  f->trees.resize(num_vertices);
  return f;
}

void sis_forest_free(void* handle) { delete static_cast<Forest*>(handle); }

void sis_forest_reset(void* handle) {
  Forest* f = static_cast<Forest*>(handle);
  for (VertexTree& v : f->trees) v = VertexTree();
}

// Append events (vertex, T-CSR position, time), in chronological order per vertex. Amortised O(log d):
// doubling the capacity copies the leaves and rebuilds (O(cap), once per doubling).
int64_t sis_forest_append(void* handle, int64_t n, const int64_t* vertex, const int64_t* position, const double* time) {
  Forest* f = static_cast<Forest*>(handle);
  int64_t touches = 0;
  for (int64_t e = 0; e < n; ++e) {
    VertexTree& v = f->trees[vertex[e]];
    if (position[e] >= v.cap) grow(v, position[e] + 1, touches);
    double weight = 1.0;
    if (f->alpha > 0) {
      if (!v.has_ref) {
        v.tref = time[e];
        v.has_ref = true;
      }
      double exponent = f->alpha * (time[e] - v.tref);
      if (exponent > 600) {  // re-base: every stored weight relative to the new reference
        v.tref = time[e];
        for (int64_t i = 0; i < v.cap; ++i)
          if (v.t[v.cap + i] > 0) v.t[v.cap + i] = std::exp(f->alpha * (v.times[i] - v.tref));
        touches += 2 * v.cap;
        rebuild(v, touches);
        exponent = 0.0;
      }
      weight = std::exp(exponent);
    }
    v.times[position[e]] = time[e];
    set_leaf(v, position[e], weight, touches);
  }
  return touches;
}

// Per query q: up to k distinct leaves of vertex[q] among its first prefix[q] positions, drawn with
// probability proportional to weight without replacement (chosen leaves zeroed, then restored), into
// out[q*k ...] (-1 padded); k uniforms per query. Returns touches, or -(q + 1) if prefix[q] exceeds what
// was appended. If a decayed prefix underflows (sum < 1e-290) its weights are recomputed relative to the
// prefix's newest event in a temporary tree (exact, O(prefix)).
int64_t sis_forest_sample(void* handle, int64_t queries, const int64_t* vertex, const int64_t* prefix, int64_t k,
                          const double* uniforms, int64_t* out) {
  Forest* f = static_cast<Forest*>(handle);
  bool integer = !(f->alpha > 0);
  int64_t touches = 0;
  std::vector<std::pair<int64_t, double>> saved;
  std::vector<double> temp;
  SumTree fallback;
  for (int64_t q = 0; q < queries; ++q) {
    int64_t* row = out + q * k;
    for (int64_t j = 0; j < k; ++j) row[j] = -1;
    VertexTree& v = f->trees[vertex[q]];
    int64_t limit = prefix[q];
    if (limit <= 0) continue;
    if (limit > v.cap) return -(q + 1);
    Uniforms u = Uniforms::from_buffer(uniforms + q * k, k);
    if (f->alpha > 0 && prefix_sum(v, limit, touches) < 1e-290) {
      double newest = v.times[limit - 1];
      temp.assign(limit, 0.0);
      for (int64_t i = 0; i < limit; ++i)
        if (v.t[v.cap + i] >= 0 && !std::isnan(v.times[i])) temp[i] = std::exp(f->alpha * (v.times[i] - newest));
      touches += 2 * limit;
      Scratch s;
      sample_wor(SIS, temp.data(), limit, k, false, u, row, touches, s);
      continue;
    }
    saved.clear();
    for (int64_t j = 0; j < k; ++j) {
      double total = prefix_sum(v, limit, touches);
      if (total <= 0) break;
      double g = draw(u, total, integer);
      int64_t leaf = search_prefix(v, g, limit, touches);
      row[j] = leaf;
      saved.emplace_back(leaf, v.t[v.cap + leaf]);
      set_leaf(v, leaf, 0.0, touches);
    }
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) set_leaf(v, it->first, it->second, touches);
  }
  return touches;
}

// Weight of leaf p of a vertex (tests), or -1 if it was never appended.
double sis_forest_leaf(void* handle, int64_t vertex, int64_t position) {
  Forest* f = static_cast<Forest*>(handle);
  const VertexTree& v = f->trees[vertex];
  if (position >= v.cap || std::isnan(v.times[position])) return -1.0;
  return v.t[v.cap + position];
}

}  // extern "C"
