// The nn core's one seam for threads: a parallel-for hook, serial unless the
// program installs one. src/nn starts no threads itself (it must build with
// em++ for a single-threaded browser worker); a native program plugs in a
// pool, and the conv kernels run their fixed work items through it.
//
//   dnnlab::parallel::ThreadPool pool(2);            // src/worker/thread_pool.hpp
//   dnnlab::nn::set_parallel_for(pool.parallel_for());
//   ...train...
//   dnnlab::nn::set_parallel_for({});                // serial again, before pool dies
//
// Determinism: callers split their work into items that do not depend on the
// thread count, and each item writes its own outputs, so any hook (or none)
// gives the same bits.
#pragma once
#include <functional>

namespace dnnlab::nn {

// Runs body(i) once for every i in [0, n), on any threads in any order, and
// returns when all have finished. body must not throw.
using ParallelFor = std::function<void(int n, const std::function<void(int)>& body)>;

// Installs the hook for the whole process (empty: serial). Not synchronised:
// set it before the kernels run, not while they run.
void set_parallel_for(ParallelFor fn);

// Runs body over [0, n) through the installed hook, or serially in order.
void parallel_for(int n, const std::function<void(int)>& body);

}  // namespace dnnlab::nn
