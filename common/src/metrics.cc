#include "strata/common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "strata/common/logging.h"

namespace strata::metrics {
namespace {

bool IsNameChar(char c, bool first, bool allow_colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (alpha || (allow_colon && c == ':')) return true;
  return !first && c >= '0' && c <= '9';
}

bool IsValidName(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, allow_colon)) return false;
  }
  return true;
}

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// `name{a="x",b="y"} value\n`; `extra` is one more already-formatted label (le="...") or empty.
void AppendSample(std::string& out, std::string_view name, const std::vector<std::string>& labels,
                  const LabelValues& values, std::string_view extra, double value) {
  out.append(name);
  if (!labels.empty() || !extra.empty()) {
    out.push_back('{');
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out.push_back(',');
      absl::StrAppend(&out, labels[i], "=\"", EscapeLabelValue(values[i]), "\"");
    }
    if (!extra.empty()) {
      if (!labels.empty()) out.push_back(',');
      out.append(extra);
    }
    out.push_back('}');
  }
  absl::StrAppend(&out, " ", FormatValue(value), "\n");
}

absl::Status CheckNames(MetricType type, const std::string& name,
                        const std::vector<std::string>& label_names) {
  if (!IsValidMetricName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid metric name '", name, "': must match [a-zA-Z_:][a-zA-Z0-9_:]*"));
  }
  if (type == MetricType::kCounter && !name.ends_with("_total")) {
    return absl::InvalidArgumentError(
        absl::StrCat("counter name '", name, "' must end in _total"));
  }
  for (size_t i = 0; i < label_names.size(); ++i) {
    const std::string& label = label_names[i];
    if (!IsValidLabelName(label) || label.starts_with("__")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metric '", name, "': invalid label name '", label,
          "': must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __"));
    }
    if (type == MetricType::kHistogram && label == "le") {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram '", name, "': label name 'le' is reserved"));
    }
    if (std::find(label_names.begin(), label_names.begin() + i, label) !=
        label_names.begin() + i) {
      return absl::InvalidArgumentError(
          absl::StrCat("metric '", name, "': duplicate label name '", label, "'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> CheckBounds(const std::string& name,
                                                std::vector<double> bounds) {
  if (!bounds.empty() && std::isinf(bounds.back()) && bounds.back() > 0) bounds.pop_back();
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram '", name, "': bucket bounds must be finite and strictly increasing"));
    }
  }
  return bounds;
}

}  // namespace

bool IsValidMetricName(std::string_view name) { return IsValidName(name, true); }
bool IsValidLabelName(std::string_view name) { return IsValidName(name, false); }

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Integers up to 2^53 are exact in a double: print them without a decimal point or exponent.
  if (value == std::floor(value) && std::fabs(value) <= 9007199254740992.0) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), value);  // shortest round-trip form
  return std::string(buf, res.ptr);
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// ---- children ---------------------------------------------------------------------------

void Counter::Increment(double delta) {
  if (!(delta >= 0)) return;  // also rejects NaN
  value_.fetch_add(delta, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  // First bound >= value: bounds are inclusive upper limits. NaN goes to +Inf.
  const size_t i = std::isnan(value)
                       ? bounds_.size()
                       : std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Collect() const {
  Snapshot s;
  s.bounds = bounds_;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = running;
  }
  // The count is the bucket total, so _count always equals the +Inf bucket even mid-update.
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> out;
  for (int i = 0; i < count; ++i) out.push_back(start + width * i);
  return out;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) out.push_back(v);
  return out;
}

CallbackHandle& CallbackHandle::operator=(CallbackHandle&& other) noexcept {
  if (this != &other) {
    Reset();
    remove_ = std::move(other.remove_);
    other.remove_ = nullptr;
  }
  return *this;
}

void CallbackHandle::Reset() {
  if (remove_) {
    auto remove = std::move(remove_);
    remove_ = nullptr;
    remove();
  }
}

// ---- families ---------------------------------------------------------------------------

void FamilyBase::AppendText(std::string& out) const {
  std::string samples;
  AppendSamples(samples);
  if (samples.empty()) return;
  absl::StrAppend(&out, "# HELP ", name_, " ", EscapeHelp(help_), "\n");
  absl::StrAppend(&out, "# TYPE ", name_, " ", TypeName(type_), "\n");
  out += samples;
}

void FamilyBase::CheckArity(const LabelValues& values) const {
  STRATA_CHECK(values.size() == label_names_.size())
      << "metric " << name_ << " has " << label_names_.size() << " labels ("
      << absl::StrJoin(label_names_, ",") << ") but got " << values.size() << " values";
}

template <typename T>
T* ScalarFamily<T>::WithLabels(const LabelValues& values) {
  CheckArity(values);
  absl::MutexLock lock(&mu_);
  auto& child = children_[values];
  if (!child) child = std::make_unique<T>();
  return child.get();
}

template <typename T>
CallbackHandle ScalarFamily<T>::AddCallback(const LabelValues& values,
                                            std::function<double()> fn) {
  CheckArity(values);
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = next_callback_id_++;
    callbacks_[values] = Callback{id, std::move(fn)};
  }
  // Removes only its own registration: a newer callback for the same labels stays.
  return CallbackHandle([this, values, id] {
    absl::MutexLock lock(&mu_);
    auto it = callbacks_.find(values);
    if (it != callbacks_.end() && it->second.id == id) callbacks_.erase(it);
  });
}

template <typename T>
void ScalarFamily<T>::AppendSamples(std::string& out) const {
  absl::MutexLock lock(&mu_);
  // Merge the two ordered maps so the output stays sorted by label values.
  auto child = children_.begin();
  auto cb = callbacks_.begin();
  while (child != children_.end() || cb != callbacks_.end()) {
    const bool take_cb =
        child == children_.end() || (cb != callbacks_.end() && cb->first <= child->first);
    if (take_cb) {
      AppendSample(out, name(), label_names(), cb->first, "", cb->second.fn());
      if (child != children_.end() && child->first == cb->first) ++child;
      ++cb;
    } else {
      AppendSample(out, name(), label_names(), child->first, "", child->second->Value());
      ++child;
    }
  }
}

template class ScalarFamily<Counter>;
template class ScalarFamily<Gauge>;

Histogram* HistogramFamily::WithLabels(const LabelValues& values) {
  CheckArity(values);
  absl::MutexLock lock(&mu_);
  auto& child = children_[values];
  if (!child) child = std::make_unique<Histogram>(bounds_);
  return child.get();
}

void HistogramFamily::AppendSamples(std::string& out) const {
  absl::MutexLock lock(&mu_);
  const std::string bucket = name() + "_bucket";
  for (const auto& [values, histogram] : children_) {
    const Histogram::Snapshot s = histogram->Collect();
    for (size_t i = 0; i <= s.bounds.size(); ++i) {
      const std::string le = i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf";
      AppendSample(out, bucket, label_names(), values, absl::StrCat("le=\"", le, "\""),
                   static_cast<double>(s.cumulative[i]));
    }
    AppendSample(out, name() + "_sum", label_names(), values, "", s.sum);
    AppendSample(out, name() + "_count", label_names(), values, "",
                 static_cast<double>(s.count));
  }
}

// ---- registry ---------------------------------------------------------------------------

Registry& Registry::Default() {
  static Registry* registry = new Registry();  // never destroyed: safe at exit
  return *registry;
}

absl::StatusOr<FamilyBase*> Registry::Register(std::unique_ptr<FamilyBase> probe) {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(probe->name());
  if (it == families_.end()) {
    FamilyBase* family = probe.get();
    families_.emplace(probe->name(), std::move(probe));
    return family;
  }
  FamilyBase* existing = it->second.get();
  bool same = existing->type() == probe->type() && existing->help() == probe->help() &&
              existing->label_names() == probe->label_names();
  if (same && probe->type() == MetricType::kHistogram) {
    same = static_cast<HistogramFamily*>(existing)->bounds() ==
           static_cast<HistogramFamily*>(probe.get())->bounds();
  }
  if (!same) {
    return absl::AlreadyExistsError(absl::StrCat(
        "metric '", probe->name(), "' is already registered with a different type, help, ",
        "labels or buckets"));
  }
  return existing;
}

absl::StatusOr<CounterFamily*> Registry::AddCounter(const std::string& name,
                                                    const std::string& help,
                                                    const std::vector<std::string>& label_names) {
  if (auto st = CheckNames(MetricType::kCounter, name, label_names); !st.ok()) return st;
  auto family = Register(
      std::make_unique<CounterFamily>(MetricType::kCounter, name, help, label_names));
  if (!family.ok()) return family.status();
  auto* counter = static_cast<CounterFamily*>(*family);
  if (label_names.empty()) counter->Default();  // a label-less metric shows 0 from the start
  return counter;
}

absl::StatusOr<GaugeFamily*> Registry::AddGauge(const std::string& name, const std::string& help,
                                                const std::vector<std::string>& label_names) {
  if (auto st = CheckNames(MetricType::kGauge, name, label_names); !st.ok()) return st;
  auto family =
      Register(std::make_unique<GaugeFamily>(MetricType::kGauge, name, help, label_names));
  if (!family.ok()) return family.status();
  auto* gauge = static_cast<GaugeFamily*>(*family);
  if (label_names.empty()) gauge->Default();
  return gauge;
}

absl::StatusOr<HistogramFamily*> Registry::AddHistogram(
    const std::string& name, const std::string& help, std::vector<double> bounds,
    const std::vector<std::string>& label_names) {
  if (auto st = CheckNames(MetricType::kHistogram, name, label_names); !st.ok()) return st;
  auto checked = CheckBounds(name, std::move(bounds));
  if (!checked.ok()) return checked.status();
  auto family = Register(
      std::make_unique<HistogramFamily>(name, help, label_names, std::move(*checked)));
  if (!family.ok()) return family.status();
  auto* histogram = static_cast<HistogramFamily*>(*family);
  if (label_names.empty()) histogram->Default();
  return histogram;
}

CounterFamily& Registry::CounterOrDie(const std::string& name, const std::string& help,
                                      const std::vector<std::string>& label_names) {
  auto family = AddCounter(name, help, label_names);
  STRATA_CHECK(family.ok()) << family.status().message();
  return **family;
}

GaugeFamily& Registry::GaugeOrDie(const std::string& name, const std::string& help,
                                  const std::vector<std::string>& label_names) {
  auto family = AddGauge(name, help, label_names);
  STRATA_CHECK(family.ok()) << family.status().message();
  return **family;
}

HistogramFamily& Registry::HistogramOrDie(const std::string& name, const std::string& help,
                                          std::vector<double> bounds,
                                          const std::vector<std::string>& label_names) {
  auto family = AddHistogram(name, help, std::move(bounds), label_names);
  STRATA_CHECK(family.ok()) << family.status().message();
  return **family;
}

std::string Registry::Serialize() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, family] : families_) family->AppendText(out);
  return out;
}

}  // namespace strata::metrics
