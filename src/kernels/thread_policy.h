// The default thread count backs off while other processes want the cores.
//
// OpenMP's barriers wait for every thread of a team: when a neighbour holds
// one of the cores, each parallel region waits for our thread on that core
// to be scheduled again, and a decoding step (hundreds of regions) ran 3-30×
// slower on 2 threads than on one (issue 38). So, unless the thread count
// was chosen (OMP_NUM_THREADS, qkv::set_num_threads), the ops' entry points
// call adapt_default_threads(): at most every kCheckInterval it counts the
// runnable tasks of the machine (/proc/loadavg), and runs
// cores − (runnable tasks that are not ours) threads, at least one, at most
// the default.
#pragma once

namespace qkv::kernels {

// Called outside parallel regions, once per op call; a few ns but for one
// read of /proc/loadavg per interval.
void adapt_default_threads();
// The thread count was chosen: adapt_default_threads() no longer changes it.
void threads_chosen();

}  // namespace qkv::kernels
