// Batched decoding against decoding one sequence after the other (issue 38,
// item 3): 8 sequences of different prompt lengths, each advanced `steps`
// greedy tokens, either all together through nn::DecoderBatch (one pass over
// the weights per step) or each alone through its own nn::DecoderSession.
// Only the steps are timed (the prompts' prefill is not).
//
//   build-batch/bench/bench_batched_decoding [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
//       [--steps 64] [--reps 3] [--threads 1,2] [--only batched|sequential]
//
// Prints, per thread count, the median tokens/s of each way and their ratio,
// by the wall clock and by the process's CPU time (which a busy machine
// disturbs less: on one thread it is the work done; on more it also counts
// the time the OpenMP threads spin while waiting). --only runs one way (for a
// profiler); the other's columns then read "-".
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "qkv/models/gguf_model.h"
#include "qkv/nn/decoder_batch.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kSequences = 8;

// Seconds of wall clock and of this process's CPU time.
struct Seconds {
  double wall = 0.0, cpu = 0.0;
};

struct Stopwatch {
  Clock::time_point wall = Clock::now();
  std::clock_t cpu = std::clock();
  Seconds elapsed() const {
    return {std::chrono::duration<double>(Clock::now() - wall).count(),
            static_cast<double>(std::clock() - cpu) / CLOCKS_PER_SEC};
  }
};

int64_t argmax(std::span<const float> row) {
  return std::max_element(row.begin(), row.end()) - row.begin();
}

std::vector<std::vector<int64_t>> prompts(int64_t vocab) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t s = 0; s < kSequences; ++s) {
    std::vector<int64_t> p;
    for (int64_t i = 0; i < 8 + 9 * s; ++i) p.push_back((s * 977 + i * 131 + 17) % vocab);
    out.push_back(p);
  }
  return out;
}

// Seconds of kSequences × steps tokens decoded one sequence after the other.
Seconds sequential(qkv::nn::DecoderModel& model, const std::vector<std::vector<int64_t>>& ps,
                   int64_t steps, int64_t max_len) {
  Seconds seconds;
  for (const auto& p : ps) {
    qkv::nn::DecoderSession session(model, 1, max_len);
    session.prefill(p);
    const Stopwatch start;
    for (int64_t t = 0; t < steps; ++t) {
      int64_t next = argmax(session.logits_row(0));
      session.step({&next, 1});
    }
    const Seconds s = start.elapsed();
    seconds.wall += s.wall;
    seconds.cpu += s.cpu;
  }
  return seconds;
}

// Seconds of the same tokens decoded all together.
Seconds batched(qkv::nn::DecoderModel& model, const std::vector<std::vector<int64_t>>& ps,
                int64_t steps, int64_t max_len) {
  qkv::nn::DecoderBatch batch(model, kSequences, max_len);
  std::vector<int64_t> ids, tokens(kSequences);
  for (const auto& p : ps) {
    ids.push_back(batch.add(p));
    tokens[ids.size() - 1] = argmax(batch.logits_row(0));
  }
  const Stopwatch start;
  for (int64_t t = 0; t < steps; ++t) {
    batch.step(ids, tokens);
    for (int64_t r = 0; r < kSequences; ++r) tokens[r] = argmax(batch.logits_row(r));
  }
  return start.elapsed();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  int64_t steps = 64, reps = 3;
  std::vector<int> thread_counts = {1, 2};
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--model") {
      model_path = value;
    } else if (flag == "--steps") {
      steps = std::stoll(value);
    } else if (flag == "--reps") {
      reps = std::stoll(value);
    } else if (flag == "--only" && (value == "batched" || value == "sequential")) {
      only = value;
    } else if (flag == "--threads") {
      thread_counts.clear();
      for (size_t at = 0; at < value.size();) {
        const size_t comma = std::min(value.find(',', at), value.size());
        thread_counts.push_back(std::stoi(value.substr(at, comma - at)));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  qkv::models::GgufModel m = qkv::models::load_gguf_model(model_path, {.max_seq_len = 256});
  const auto ps = prompts(m.model.config().vocab_size);
  const int64_t max_len = 8 + 9 * kSequences + steps + 1;
  std::printf("%s: %lld sequences (prompts of 8..%lld tokens), %lld greedy steps each\n",
              model_path.c_str(), static_cast<long long>(kSequences),
              static_cast<long long>(8 + 9 * (kSequences - 1)), static_cast<long long>(steps));
  std::printf("         wall clock                               CPU time\n");
  std::printf(
      "threads  sequential tok/s  batched tok/s  ratio  sequential tok/s  batched tok/s  "
      "ratio\n");
  for (int threads : thread_counts) {
    qkv::set_num_threads(threads);
    batched(m.model, ps, 4, max_len);  // warm-up
    std::vector<double> seq, bat, seq_cpu, bat_cpu;
    const double tokens = static_cast<double>(kSequences * steps);
    for (int64_t r = 0; r < reps; ++r) {  // interleaved, so that both see the same load
      const Seconds s =
          only == "batched" ? Seconds{1e30, 1e30} : sequential(m.model, ps, steps, max_len);
      const Seconds b =
          only == "sequential" ? Seconds{1e30, 1e30} : batched(m.model, ps, steps, max_len);
      seq.push_back(tokens / s.wall);
      bat.push_back(tokens / b.wall);
      seq_cpu.push_back(tokens / s.cpu);
      bat_cpu.push_back(tokens / b.cpu);
    }
    if (only.empty())
      std::printf("%7d  %16.1f  %13.1f  %5.2f  %16.1f  %13.1f  %5.2f\n", threads, median(seq),
                  median(bat), median(bat) / median(seq), median(seq_cpu), median(bat_cpu),
                  median(bat_cpu) / median(seq_cpu));
    else  // one way ran: its tokens/s, the other's columns and the ratios empty
      std::printf("%7d  %16s  %13s  %5s  %16s  %13s  %5s\n", threads,
                  only == "sequential" ? std::to_string(median(seq)).c_str() : "-",
                  only == "batched" ? std::to_string(median(bat)).c_str() : "-", "-",
                  only == "sequential" ? std::to_string(median(seq_cpu)).c_str() : "-",
                  only == "batched" ? std::to_string(median(bat_cpu)).c_str() : "-", "-");
    std::fflush(stdout);  // each thread count as it finishes, also into a pipe
  }
  return 0;
}
