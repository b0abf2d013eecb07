// serve::Metrics — what `qkv serve` reports on GET /metrics, in Prometheus'
// text format (version 0.0.4): requests by endpoint and status, queue length,
// busy slots, tokens in and out, and histograms of the time to the first
// token, between tokens, and of the sequences each decoding step advanced. Every method is safe to
// call from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace qkv::serve {

// A Prometheus histogram: counts of observations at most each upper bound,
// their sum and their number.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The _bucket, _sum and _count lines of the metric `name`.
  std::string text(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, not cumulative; the last: above every bound
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  void count_request(const std::string& endpoint, int status);
  void add_prompt_tokens(int64_t fed, int64_t reused);
  void add_generated_tokens(int64_t n);
  void add_embedded_tokens(int64_t n);
  void observe_time_to_first_token(double seconds);
  void observe_inter_token(double seconds);
  void observe_batch_rows(int64_t n);
  void set_queue_length(int64_t n);
  void set_busy_slots(int64_t n);
  void set_slots(int64_t n);

  std::string prometheus_text() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  int64_t prompt_tokens_ = 0, reused_prompt_tokens_ = 0, generated_tokens_ = 0;
  int64_t embedded_tokens_ = 0;
  int64_t queue_length_ = 0, busy_slots_ = 0, slots_ = 0;
  Histogram time_to_first_token_;
  Histogram inter_token_;
  Histogram batch_rows_;
};

}  // namespace qkv::serve
