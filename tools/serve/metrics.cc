// serve::Metrics: counters under one mutex, printed as Prometheus text.
#include "serve/metrics.h"

#include <algorithm>
#include <cstdio>

namespace qkv::serve {

namespace {

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

// "# HELP name help\n# TYPE name type\n"
std::string header(const char* name, const char* type, const char* help) {
  return std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// A metric of one value: its header and its sample.
std::string scalar(const char* name, const char* type, const char* help, int64_t value) {
  return header(name, type, help) + name + " " + std::to_string(value) + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t at = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[at];
  sum_ += value;
  ++count_;
}

std::string Histogram::text(const std::string& name) const {
  std::string out;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + number(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
  return out;
}

// Seconds: first tokens wait for a prompt (up to a minute on a long one);
// tokens follow each other in milliseconds to a second.
Metrics::Metrics()
    : time_to_first_token_({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      inter_token_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      batch_rows_({1, 2, 4, 8, 16, 32, 64, 128, 256}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

void Metrics::add_prompt_tokens(int64_t fed, int64_t reused) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += fed + reused;
  reused_prompt_tokens_ += reused;
}

void Metrics::add_generated_tokens(int64_t n) {
  std::lock_guard lock(mutex_);
  generated_tokens_ += n;
}

void Metrics::add_embedded_tokens(int64_t n) {
  std::lock_guard lock(mutex_);
  embedded_tokens_ += n;
}

void Metrics::observe_time_to_first_token(double seconds) {
  std::lock_guard lock(mutex_);
  time_to_first_token_.observe(seconds);
}

void Metrics::observe_inter_token(double seconds) {
  std::lock_guard lock(mutex_);
  inter_token_.observe(seconds);
}

void Metrics::observe_batch_rows(int64_t n) {
  std::lock_guard lock(mutex_);
  batch_rows_.observe(static_cast<double>(n));
}

void Metrics::set_queue_length(int64_t n) {
  std::lock_guard lock(mutex_);
  queue_length_ = n;
}

void Metrics::set_busy_slots(int64_t n) {
  std::lock_guard lock(mutex_);
  busy_slots_ = n;
}

void Metrics::set_slots(int64_t n) {
  std::lock_guard lock(mutex_);
  slots_ = n;
}

std::string Metrics::prometheus_text() const {
  std::lock_guard lock(mutex_);
  std::string out =
      header("qkv_requests_total", "counter", "HTTP requests by endpoint and status.");
  for (const auto& [key, count] : requests_)
    out += "qkv_requests_total{endpoint=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(count) + "\n";
  out +=
      scalar("qkv_queue_length", "gauge", "Generation requests waiting for a slot.", queue_length_);
  out += scalar("qkv_busy_slots", "gauge", "Decoding slots holding a request.", busy_slots_);
  out += scalar("qkv_slots", "gauge", "Decoding slots (--parallel).", slots_);
  out += scalar("qkv_prompt_tokens_total", "counter", "Prompt tokens of generation requests.",
                prompt_tokens_);
  out += scalar("qkv_prompt_tokens_reused_total", "counter",
                "Prompt tokens whose keys and values a slot's cache already held.",
                reused_prompt_tokens_);
  out += scalar("qkv_generated_tokens_total", "counter", "Tokens generated.", generated_tokens_);
  out +=
      scalar("qkv_embedded_tokens_total", "counter", "Tokens of embedded texts.", embedded_tokens_);
  out += header("qkv_time_to_first_token_seconds", "histogram",
                "From a request's arrival to its first generated token.");
  out += time_to_first_token_.text("qkv_time_to_first_token_seconds");
  out += header("qkv_inter_token_seconds", "histogram", "Between two tokens of one reply.");
  out += inter_token_.text("qkv_inter_token_seconds");
  out += header("qkv_batch_rows", "histogram",
                "Sequences advanced together by one batched decoding step.");
  out += batch_rows_.text("qkv_batch_rows");
  return out;
}

}  // namespace qkv::serve
