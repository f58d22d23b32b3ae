// The layout search: every combination the fixed choices leave, estimated,
// the ones that fit sorted by step time. Layouts the cost model refuses
// (plan_cost.h's estimate) are skipped, not errors: the search only
// proposes; a fixed choice that leaves nothing is reported by the caller.
#include <algorithm>
#include <cstdio>

#include "braid/error.h"
#include "braid/plan_search.h"

namespace braid::plan {
namespace {

template <class T>
bool allowed(const std::optional<T>& fixed, const T& v) {
  return !fixed || *fixed == v;
}

std::vector<int> powers_of_two_upto(int64_t n) {
  std::vector<int> v;
  for (int64_t p = 1; p <= n; p *= 2) v.push_back(int(p));
  return v;
}

struct Term {
  const char* name;
  double Estimate::*field;
};
const Term kTerms[] = {{"compute", &Estimate::compute_s},
                       {"tp communication", &Estimate::tp_comm_s},
                       {"pipeline transfers", &Estimate::p2p_s},
                       {"bubble", &Estimate::bubble_s},
                       {"exposed dp communication", &Estimate::dp_exposed_s},
                       {"optimizer step", &Estimate::optimizer_s}};

std::string fmt(const char* f, double a, double b = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

}  // namespace

SearchResult search(const ModelDesc& m, const Cluster& c, const SearchSpec& s) {
  if (s.devices < 1) throw Error(Errc::kInvalidArgument, "plan: devices must be >= 1");
  if (s.batch < 1) throw Error(Errc::kInvalidArgument, "plan: batch must be >= 1");
  for (auto [name, v] : {std::pair{"tp", s.tp}, {"pp", s.pp}, {"dp", s.dp}})
    if (v && (*v < 1 || s.devices % *v != 0))
      throw Error(Errc::kInvalidArgument, std::string("plan: --") + name + " " +
                                              std::to_string(*v) + " does not divide " +
                                              std::to_string(s.devices) + " devices");
  if (s.schedule && *s.schedule != "gpipe" && *s.schedule != "1f1b" && *s.schedule != "interleaved")
    throw Error(Errc::kInvalidArgument,
                "plan: --schedule '" + *s.schedule + "' (gpipe, 1f1b, interleaved)");
  const bool gpt = m.kind == "gpt";
  SearchResult out;
  std::vector<int> tps = gpt ? powers_of_two_upto(c.devices_per_host) : std::vector<int>{1};
  if (s.tp && std::find(tps.begin(), tps.end(), *s.tp) == tps.end()) tps = {*s.tp};
  for (int tp : tps) {
    if (!allowed(s.tp, tp) || s.devices % tp != 0) continue;
    for (int pp = 1; pp <= s.devices / tp; ++pp) {
      if ((s.devices / tp) % pp != 0 || !allowed(s.pp, pp)) continue;
      if (!gpt && pp > 1) break;
      if (gpt && pp > m.gpt.layers) break;
      const int dp = s.devices / tp / pp;
      if (!allowed(s.dp, dp) || s.batch % dp != 0) continue;
      std::vector<int> mbss = powers_of_two_upto(std::min<int64_t>(s.batch / dp, 64));
      if (s.mbs) mbss = {*s.mbs};
      for (int mbs : mbss) {
        if ((s.batch / dp) % mbs != 0) continue;
        struct Sched {
          std::string name;
          int v;
        };
        std::vector<Sched> scheds;
        if (pp == 1 && ((s.schedule && *s.schedule == "interleaved") ||
                        (s.virtual_stages && *s.virtual_stages > 1)))
          continue;
        // One stage: every schedule is the same; keep the name asked for.
        if (pp == 1) scheds = {{s.schedule.value_or("1f1b"), 1}};
        else scheds = {{"gpipe", 1}, {"1f1b", 1}, {"interleaved", 2}, {"interleaved", 4}};
        if (pp > 1 && s.virtual_stages) {
          if (*s.virtual_stages >= 2) scheds = {{"interleaved", *s.virtual_stages}};
          else scheds.resize(2);  // gpipe, 1f1b
        }
        if (s.schedule && pp > 1) {
          std::vector<Sched> keep;
          for (const Sched& x : scheds)
            if (x.name == *s.schedule) keep.push_back(x);
          scheds = keep;
        }
        for (const Sched& sc : scheds) {
          const int v = sc.v;
          for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
            if (!allowed(s.recompute, rc) || (!gpt && rc != Recompute::kNone)) continue;
            for (bool sp : {false, true}) {
              if (!allowed(s.sequence_parallel, sp) || (sp && tp == 1)) continue;
              for (int zero = 0; zero <= 3; ++zero) {
                if (!allowed(s.zero, zero) || (pp > 1 && zero >= 2)) continue;
                if (dp == 1 && zero > 0 && !s.zero) continue;  // nothing to shard over
                Layout l{tp, pp, dp, mbs, sc.name, v, rc, sp, zero};
                Estimate e;
                try {
                  e = estimate(m, c, l, s.batch, true);
                } catch (const Error& err) {
                  if (err.code() != Errc::kInvalidArgument) throw;
                  continue;  // a layout the cost model refuses
                }
                ++out.considered;
                if (e.fits) {
                  out.fits.push_back(std::move(e));
                } else {
                  ++out.too_big;
                  const double t = e.memory.total();
                  if (out.smallest_overflow_bytes == 0 || t < out.smallest_overflow_bytes)
                    out.smallest_overflow_bytes = t;
                }
              }
            }
          }
        }
      }
    }
  }
  std::stable_sort(out.fits.begin(), out.fits.end(),
                   [](const Estimate& a, const Estimate& b) { return a.step_s < b.step_s; });
  return out;
}

std::string why_wins(const Estimate& best, const Estimate& other) {
  const Term* decide = &kTerms[0];
  double most = -1e300;
  for (const Term& t : kTerms) {
    const double d = other.*(t.field) - best.*(t.field);
    if (d > most) {
      most = d;
      decide = &t;
    }
  }
  const double gap = other.step_s - best.step_s;
  return fmt("%.3g s faster", gap) + fmt(" (%.1f%%) than ", 100 * gap / other.step_s) +
         layout_text(other.layout) + ": " + decide->name + fmt(" %.3g s vs %.3g s", best.*(decide->field), other.*(decide->field));
}

std::string dominant_term(const Estimate& e) {
  const Term* top = &kTerms[0];
  for (const Term& t : kTerms)
    if (e.*(t.field) > e.*(top->field)) top = &t;
  return std::string(top->name) + fmt(" %.0f%% of the step", 100 * e.*(top->field) / e.step_s);
}

}  // namespace braid::plan
