#include "model/cost.h"

#include <fmt/format.h>

#include "probes/error.h"

namespace infercast {

double benefit_ratio(double tps_a, double tps_b, double cost_a, double cost_b) {
  if (!(tps_a > 0) || !(tps_b > 0) || !(cost_a > 0) || !(cost_b > 0)) {
    throw UsageError("throughputs and costs must all be positive");
  }
  return (tps_a / tps_b) / (cost_a / cost_b);
}

double hourly_cost(const CostInputs& c) {
  if (!(c.years > 0) || !(c.utilization > 0) || c.utilization > 1 || c.usd_per_kwh < 0 || c.power_w < 0) {
    throw UsageError("amortization years and utilization (0-1] must be positive, power and electricity price not negative");
  }
  if (c.hourly_usd) return *c.hourly_usd;
  if (!c.purchase_usd) throw UsageError("no price: give a purchase price or an hourly price");
  return *c.purchase_usd / (c.years * 365.25 * 24) + c.power_w / 1000.0 * c.usd_per_kwh;
}

double cost_per_million_tokens(const CostInputs& c, double tps) {
  if (!(tps > 0)) throw UsageError("throughput must be positive");
  return hourly_cost(c) / (tps * 3600.0 * c.utilization) * 1e6;
}

}  // namespace infercast
