// parallel/topology.cpp: see topology.h.
#include "parallel/topology.h"
#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

namespace paralab {

namespace {
std::string grid_flags(const GridSpec& s) {
  return "--tp " + std::to_string(s.tp) + " --cp " + std::to_string(s.cp) + " --pp " +
         std::to_string(s.pp) + " --ep " + std::to_string(s.ep) + " --etp " +
         std::to_string(s.etp) + ", world size " + std::to_string(s.world);
}
// A bad grid is bad input: exit code 2 (notes/design.md).
RankLayout checked_layout(const GridSpec& spec) {
  try {
    return RankLayout(spec);
  } catch (const std::invalid_argument& e) {
    throw FatalError(e.what(), 2);
  }
}
}  // namespace

RankLayout::RankLayout(const GridSpec& spec) : spec_(spec) {
  GridSpec& s = spec_;
  if (s.etp == 0) s.etp = s.tp;
  if (s.world < 1 || s.tp < 1 || s.cp < 1 || s.pp < 1 || s.ep < 1 || s.etp < 1)
    throw std::invalid_argument("every parallel size must be >= 1 (" + grid_flags(s) + ")");
  const int model = s.tp * s.cp * s.pp;
  if (s.world % model != 0)
    throw std::invalid_argument("world size must be divisible by tp*cp*pp: " +
                                std::to_string(s.world) + " % " + std::to_string(model) +
                                " != 0 (" + grid_flags(s) + ")");
  dp_ = s.world / model;
  // The expert grid splits each stage's world/pp ranks (pp divides world: it divides model).
  const int stage = s.world / s.pp, expert_model = s.etp * s.ep;
  if (stage % expert_model != 0)
    throw std::invalid_argument(
        "--expert-tensor-parallel-size x --expert-model-parallel-size must divide world / "
        "pipeline-model-parallel-size: " + std::to_string(stage) + " % " +
        std::to_string(expert_model) + " != 0 (" + grid_flags(s) + ")");
  edp_ = stage / expert_model;

  // Each group kind: a rank's group is named by the coordinates held fixed ("color"), its
  // place in the group by the coordinates that vary ("pos", fastest first, as in rank).
  // The dense kinds read the rank's dense coordinates c, the expert kinds its expert ones x.
  for (int g = 0; g < kNumCommGroups; ++g) {
    std::map<std::vector<int>, int> index_of_color;
    which_[g].assign(s.world, 0);
    pos_[g].assign(s.world, 0);
    for (int r = 0; r < s.world; ++r) {
      const RankCoord c = coord_of(r);
      const ExpertCoord x = expert_coord_of(r);
      std::vector<int> color;
      int pos = 0;
      switch (CommGroup(g)) {
        case CommGroup::TP: color = {c.cp, c.dp, c.pp}; pos = c.tp; break;
        case CommGroup::CP: color = {c.tp, c.dp, c.pp}; pos = c.cp; break;
        case CommGroup::PP: color = {c.tp, c.cp, c.dp}; pos = c.pp; break;
        case CommGroup::DP: color = {c.tp, c.cp, c.pp}; pos = c.dp; break;
        case CommGroup::DP_CP: color = {c.tp, c.pp}; pos = c.cp + s.cp * c.dp; break;
        case CommGroup::EP: color = {x.etp, x.edp, x.pp}; pos = x.ep; break;
        case CommGroup::ETP: color = {x.ep, x.edp, x.pp}; pos = x.etp; break;
        case CommGroup::ETP_EP: color = {x.edp, x.pp}; pos = x.etp + s.etp * x.ep; break;
        case CommGroup::EDP: color = {x.etp, x.ep, x.pp}; pos = x.edp; break;
        case CommGroup::EMBEDDING:
          if (s.pp > 1 && (c.pp == 0 || c.pp == s.pp - 1)) {
            color = {c.tp, c.cp, c.dp};
            pos = c.pp == 0 ? 0 : 1;
          } else {
            color = {-1, r};  // pp == 1 or a middle stage: a group of its own
          }
          break;
        case CommGroup::MIRROR:  // pp ranks r and pp - 1 - r at the same (tp, cp, dp)
          color = {c.tp, c.cp, c.dp, std::min(c.pp, s.pp - 1 - c.pp)};
          pos = c.pp < s.pp - 1 - c.pp ? 0 : c.pp == s.pp - 1 - c.pp ? 0 : 1;
          break;
        case CommGroup::PCIE: color = {-2, r}; break;  // the rank alone, with its host
        default: color = {0}; pos = r; break;  // WORLD
      }
      auto it = index_of_color.emplace(color, int(index_of_color.size())).first;
      which_[g][r] = it->second;
      pos_[g][r] = pos;
    }
    groups_[g].assign(index_of_color.size(), {});
    for (int r = 0; r < s.world; ++r) {
      std::vector<int>& members = groups_[g][which_[g][r]];
      if (int(members.size()) <= pos_[g][r]) members.resize(pos_[g][r] + 1, -1);
      members[pos_[g][r]] = r;
    }
  }
}

int RankLayout::rank_of(const RankCoord& c) const {
  return c.tp + spec_.tp * (c.cp + spec_.cp * (c.dp + dp_ * c.pp));
}

RankCoord RankLayout::coord_of(int rank) const {
  RankCoord c;
  c.tp = rank % spec_.tp;
  rank /= spec_.tp;
  c.cp = rank % spec_.cp;
  rank /= spec_.cp;
  c.dp = rank % dp_;
  c.pp = rank / dp_;
  return c;
}

int RankLayout::expert_rank_of(const ExpertCoord& x) const {
  return x.etp + spec_.etp * (x.ep + spec_.ep * (x.edp + edp_ * x.pp));
}

// pp = rank / (world/pp) here as in coord_of (tp*cp*dp = etp*ep*edp = world/pp): the two
// grids agree on every rank's stage, hence on the pp groups.
ExpertCoord RankLayout::expert_coord_of(int rank) const {
  ExpertCoord x;
  x.etp = rank % spec_.etp;
  rank /= spec_.etp;
  x.ep = rank % spec_.ep;
  rank /= spec_.ep;
  x.edp = rank % edp_;
  x.pp = rank / edp_;
  return x;
}

const std::vector<std::vector<int>>& RankLayout::groups(CommGroup g) const {
  return groups_[static_cast<int>(g)];
}
const std::vector<int>& RankLayout::group_of(CommGroup g, int rank) const {
  return groups_[static_cast<int>(g)][which_[static_cast<int>(g)][rank]];
}
int RankLayout::group_index(CommGroup g, int rank) const {
  return which_[static_cast<int>(g)][rank];
}
int RankLayout::index_in(CommGroup g, int rank) const {
  return pos_[static_cast<int>(g)][rank];
}
int RankLayout::pp_prev_rank(int rank) const {
  RankCoord c = coord_of(rank);
  c.pp = (c.pp + spec_.pp - 1) % spec_.pp;
  return rank_of(c);
}
int RankLayout::pp_next_rank(int rank) const {
  RankCoord c = coord_of(rank);
  c.pp = (c.pp + 1) % spec_.pp;
  return rank_of(c);
}
bool RankLayout::in_embedding_group(int rank) const {
  const int stage = coord_of(rank).pp;
  return stage == 0 || stage == spec_.pp - 1;
}

std::string describe_grid(const RankLayout& L) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "dense grid: world %d = tp %d x cp %d x dp %d x pp %d; expert grid: world %d = "
                "etp %d x ep %d x edp %d x pp %d\n"
                "dense:  rank = tp_rank + %d*(cp_rank + %d*(dp_rank + %d*pp_rank))\n"
                "expert: rank = etp_rank + %d*(ep_rank + %d*(edp_rank + %d*pp_rank))\n\n"
                "  rank   tp  cp  dp  pp   etp  ep edp   pp_prev pp_next\n",
                L.world(), L.tp(), L.cp(), L.dp(), L.pp(), L.world(), L.etp(), L.ep(),
                L.edp(), L.pp(), L.tp(), L.cp(), L.dp(), L.etp(), L.ep(), L.edp());
  std::string out = buf;
  for (int r = 0; r < L.world(); ++r) {
    const RankCoord c = L.coord_of(r);
    const ExpertCoord x = L.expert_coord_of(r);
    std::snprintf(buf, sizeof buf, "  %4d  %3d %3d %3d %3d   %3d %3d %3d   %7d %7d\n", r, c.tp,
                  c.cp, c.dp, c.pp, x.etp, x.ep, x.edp, L.pp_prev_rank(r), L.pp_next_rank(r));
    out += buf;
  }
  out += "\n";
  for (int g = 0; g < kNumCommGroups; ++g) {
    std::snprintf(buf, sizeof buf, "  %-10s", group_name(CommGroup(g)));
    out += buf;
    for (const std::vector<int>& members : L.groups(CommGroup(g))) {
      out += " [";
      for (size_t i = 0; i < members.size(); ++i)
        out += (i ? " " : "") + std::to_string(members[i]);
      out += "]";
    }
    out += "\n";
  }
  return out;
}

Topology::Topology(const GridSpec& spec, CommBackend backend, kernels::Device device,
                   void* cuda_stream)
    : layout_(checked_layout(spec)),
      rank_(paralab::world().rank),
      coord_(layout_.coord_of(rank_)),
      expert_coord_(layout_.expert_coord_of(rank_)) {
  if (paralab::world().size != spec.world)
    throw FatalError("the grid's world size " + std::to_string(spec.world) +
                     " is not the number of ranks launched, " +
                     std::to_string(paralab::world().size), 2);
  if (backend == CommBackend::NCCL) {
#ifdef PARALAB_CPU_ONLY
    throw FatalError("--comm nccl needs the CUDA build (this one is CPU_ONLY)", 2);
#else
    if (device != kernels::Device::CUDA)
      throw FatalError("--comm nccl needs --device cuda", 2);
#endif
  }
  // Every rank walks the kinds in the same order, so the collective splits (and NCCL
  // inits) match; a kind whose whole partition equals an earlier one's reuses it.
  std::array<std::shared_ptr<detail::Backend>, kNumCommGroups> made;
  for (int g = 0; g < kNumCommGroups; ++g) {
    const CommGroup kind = CommGroup(g);
    for (int h = 0; h < g && !made[g]; ++h)
      if (layout_.groups(CommGroup(h)) == layout_.groups(kind)) made[g] = made[h];
    if (!made[g]) {
      const bool nccl = backend == CommBackend::NCCL;
      auto mpi = detail::make_mpi_backend(layout_.group_index(kind, rank_),
                                          layout_.index_in(kind, rank_),
                                          nccl ? kernels::Device::CPU : device);
      made[g] = nccl ? detail::make_nccl_backend(mpi, cuda_stream) : mpi;
    }
    comms_[g] = std::make_unique<Communicator>(kind, layout_.group_of(kind, rank_), made[g],
                                               backend, device);
  }
}

}  // namespace paralab
