"""How many threads a generated C++ kernel's parallel region uses (issue #17 item 6).

A kernel's outer loops run as one OpenMP region (``kernel.py`` writes it). With every
core free, a region of ``n`` threads splits the work evenly and ends at a barrier. When
another process keeps a core busy, the thread that shares its core waits a scheduler time
slice (milliseconds) for its turn, and the whole call waits with it: a 0.5 ms kernel took
several ms per call on the 2-core CI machine beside one busy process.

The policy needs no system query per call: the region measures itself. Each thread
stamps the time it finished its share (``EmberTeamMember``); after the region,
``EmberTeam`` compares the last finisher with the first. Shares are equal (a static
schedule; a region has no more threads than iterations, so shares differ by at most
2x), so a spread (*skew*) larger than ``SKEW_RATIO`` times the first finisher's busy time
and at least ``SKEW_MIN_NS`` means a thread did not get a core. Then the
kernel's library halves its thread limit and keeps it for a back-off time that doubles
with each contended call, up to ``BACKOFF_MAX_NS``; after it, a probe (a call with twice
the limit) runs. A clean call restores the threads it used; a clean call with every
thread lifts the limit and halves the back-off (not below ``BACKOFF_BASE_NS``), so a
machine where one call in a few finds its core taken keeps a long back-off: one lucky
probe does not bring back the slow calls. A contended probe costs one slow call per
back-off period (a few ms per second once the back-off has grown).

Work below ``PARALLEL_THRESHOLD`` (loop iterations times reduction length) always runs
serially. The thread count never exceeds ``omp_get_max_threads()``, which is what
``torch.set_num_threads`` sets; the policy passes it to each region (``num_threads``) and
changes no process-wide setting (not torch's, not OpenMP's ``omp_set_num_threads``,
``omp_set_dynamic`` or wait policy). The state is per compiled library (one per graph).
"""

from __future__ import annotations

# The policy's numbers (rendered into the prelude as constants):
THREAD_POLICY: dict[str, int] = {
    "SKEW_RATIO": 2,               # skew > ratio * busy time (uneven shares: up to 1x) ...
    "SKEW_MIN_NS": 250_000,        # ... and > 0.25 ms: a thread lost its core
    "BACKOFF_BASE_NS": 10_000_000,   # shortest back-off: 10 ms (the first is twice that)
    "BACKOFF_MAX_NS": 1_000_000_000,  # the back-off doubles up to 1 s
}

THREADS_PRELUDE = (
    "// Threading policy (ember/inductor/codegen/cpp/threads.py): a region that finds a\n"
    "// core taken (one thread finishing far behind the others) halves this library's\n"
    "// thread limit for a back-off time that doubles with each contended call.\n"
    "#include <atomic>\n#include <chrono>\n#include <omp.h>\n"
    + "".join(f"static constexpr int64_t EMBER_{k} = {v};\n" for k, v in THREAD_POLICY.items())
    + r"""struct EmberTeamState { int limit; int64_t retry_ns; int64_t backoff_ns; };
// limit 0: no limit (every thread).
static inline int ember_team_size(const EmberTeamState& s, int max_threads, int64_t now) {
    if (s.limit <= 0 || s.limit >= max_threads) return max_threads;
    if (now >= s.retry_ns) return std::min(max_threads, 2 * s.limit);  // probe
    return s.limit;
}
static inline EmberTeamState ember_team_update(EmberTeamState s, int used, int max_threads,
                                               int64_t busy_ns, int64_t skew_ns, int64_t now) {
    if (used <= 1) return s;
    if (skew_ns > EMBER_SKEW_RATIO * busy_ns && skew_ns > EMBER_SKEW_MIN_NS) {
        s.backoff_ns = std::min(2 * s.backoff_ns, EMBER_BACKOFF_MAX_NS);
        s.limit = std::max(1, used / 2);
        s.retry_ns = now + s.backoff_ns;
    } else if (used >= max_threads) {
        s = EmberTeamState{0, 0, std::max(s.backoff_ns / 2, EMBER_BACKOFF_BASE_NS)};
    } else if (used > s.limit) {
        s.limit = used;
    }
    return s;
}
static std::atomic<int> ember_team_limit{0};
static std::atomic<int64_t> ember_team_retry_ns{0};
static std::atomic<int64_t> ember_team_backoff_ns{EMBER_BACKOFF_BASE_NS};
static inline int64_t ember_now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now().time_since_epoch()).count();
}
static inline EmberTeamState ember_team_state() {
    return EmberTeamState{ember_team_limit.load(std::memory_order_relaxed),
                          ember_team_retry_ns.load(std::memory_order_relaxed),
                          ember_team_backoff_ns.load(std::memory_order_relaxed)};
}
// One call's region: picks its size, collects finish times, updates the limit after it.
struct EmberTeam {
    int size = 1, max_threads = 1;
    int64_t start_ns = 0;
    std::atomic<int64_t> first_end{INT64_MAX}, last_end{0};
    // work: iterations times reduction length; iterations: of the parallel loops (no
    // more threads than that, so every thread has a share and shares differ by at most 2x)
    EmberTeam(int64_t work, int64_t threshold, int64_t iterations) {
        if (work < threshold || iterations < 2) return;
        max_threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), iterations));
        if (max_threads <= 1) return;
        start_ns = ember_now_ns();
        size = ember_team_size(ember_team_state(), max_threads, start_ns);
    }
    void finished(int64_t t) {
        int64_t v = first_end.load(std::memory_order_relaxed);
        while (t < v && !first_end.compare_exchange_weak(v, t, std::memory_order_relaxed)) {}
        v = last_end.load(std::memory_order_relaxed);
        while (t > v && !last_end.compare_exchange_weak(v, t, std::memory_order_relaxed)) {}
    }
    ~EmberTeam() {
        if (size <= 1) return;
        const int64_t first = first_end.load(), last = last_end.load();
        const EmberTeamState s = ember_team_update(ember_team_state(), size, max_threads,
                                                   first - start_ns, last - first, last);
        ember_team_limit.store(s.limit, std::memory_order_relaxed);
        ember_team_retry_ns.store(s.retry_ns, std::memory_order_relaxed);
        ember_team_backoff_ns.store(s.backoff_ns, std::memory_order_relaxed);
    }
};
// Lives for one thread's share of the region; stamps its finish time.
struct EmberTeamMember {
    EmberTeam& team;
    explicit EmberTeamMember(EmberTeam& t) : team(t) {}
    ~EmberTeamMember() { if (team.size > 1) team.finished(ember_now_ns()); }
};
"""
)
