// The task queue alone, by URL: publish N tasks in one batch, then W worker
// processes lease and ack until the queue is empty. Prints publish/s and
// lease+ack/s, and checks every task was acked exactly once.
//
//   build/release/bench/queue_bench 'amqp://guest:guest@127.0.0.1:5672/%2f?prefetch=4' 10000 2
//   build/release/bench/queue_bench sqlite:/tmp/q.db 10000 2
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "queue/task_queue.hpp"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: queue_bench URL TASKS WORKERS\n";
    return 2;
  }
  const std::string url = argv[1];
  const int n = std::stoi(argv[2]), workers = std::stoi(argv[3]);
  const std::string queue = "queue_bench." + std::to_string(getpid());
  std::vector<std::string> payloads;
  for (int i = 0; i < n; ++i) payloads.push_back("task " + std::to_string(i));
  double publish_s = 0;
  {
    auto q = dnnlab::queue::open_task_queue(url);
    auto t0 = Clock::now();
    q->publish_batch(queue, payloads);
    publish_s = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  // Each worker reports how many it acked through a pipe.
  int fds[2];
  if (pipe(fds) != 0) return 1;
  auto t0 = Clock::now();
  for (int w = 0; w < workers; ++w) {
    if (fork() != 0) continue;
    int acked = 0;
    try {
      auto q = dnnlab::queue::open_task_queue(url);  // after fork: its own connection
      while (auto lease = q->lease(queue, "bench-" + std::to_string(w), 60))
        acked += q->ack(*lease) ? 1 : 0;
    } catch (const std::exception& e) {
      std::cerr << "worker " << w << ": " << e.what() << "\n";
    }
    (void)!write(fds[1], &acked, sizeof acked);
    _exit(0);
  }
  int total = 0;
  for (int w = 0; w < workers; ++w) {
    int acked = 0;
    if (read(fds[0], &acked, sizeof acked) == sizeof acked) total += acked;
    wait(nullptr);
  }
  const double work_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("%d tasks: publish %.0f/s, lease+ack %.0f/s with %d workers, acked %d\n", n,
              n / publish_s, n / work_s, workers, total);
  return total == n ? 0 : 1;
}
