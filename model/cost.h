#pragma once
// Cost of serving: the cost-benefit ratio of one machine over another, cost per million tokens
// with power and amortization, and the concurrency where one becomes cheaper than the other.
#include <optional>
#include <string>

namespace infercast {

// (throughput_a / throughput_b) / (cost_a / cost_b): how much more throughput per dollar A
// gives than B. Throws UsageError for a non-positive input.
double benefit_ratio(double tps_a, double tps_b, double cost_a, double cost_b);

struct CostInputs {
  std::optional<double> purchase_usd;  // amortized over `years`
  std::optional<double> hourly_usd;    // cloud price (power included)
  double power_w = 0;
  double years = 3;
  double usd_per_kwh = 0.15;
  double utilization = 1.0;            // share of hours the machine serves at this load
};

// Dollars per hour of running; throws UsageError when there is no price.
double hourly_cost(const CostInputs& c);
// Dollars per million generated tokens at `tps` tokens per second.
double cost_per_million_tokens(const CostInputs& c, double tps);

}  // namespace infercast
