// A checker of Prometheus's text exposition format (version 0.0.4), written from the format's
// rules (prometheus.io/docs/instrumenting/exposition_formats), for tests of /metrics: it parses
// every line and returns the first broken rule, naming the line.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace colony::test {

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0.0;
};

struct PromText {
  std::string error;  // empty when the text follows the format
  std::vector<PromSample> samples;
  std::map<std::string, std::string> types;  // family -> type
  // The value of the sample `name` whose labels include `labels`; NaN when there is none.
  double value(const std::string& name,
               const std::map<std::string, std::string>& labels = {}) const {
    for (const PromSample& s : samples) {
      if (s.name != name) continue;
      bool all = true;
      for (const auto& [k, v] : labels) all = all && s.labels.count(k) && s.labels.at(k) == v;
      if (all) return s.value;
    }
    return std::nan("");
  }
};

namespace detail {

inline bool prom_name(const std::string& s, bool label) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (!label && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

inline bool prom_value(const std::string& s, double& v) {
  if (s == "+Inf" || s == "Inf") return v = INFINITY, true;
  if (s == "-Inf") return v = -INFINITY, true;
  if (s == "NaN") return v = NAN, true;
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// The family a sample belongs to, given the families' types seen so far.
inline std::string prom_family(const std::string& name,
                               const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string suf = suffix;
    if (name.size() > suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0) {
      const std::string base = name.substr(0, name.size() - suf.size());
      auto it = types.find(base);
      if (it != types.end() && (it->second == "histogram" || it->second == "summary")) return base;
    }
  }
  return name;
}

}  // namespace detail

inline PromText parse_prom_text(const std::string& text) {
  using namespace detail;
  PromText out;
  if (!text.empty() && text.back() != '\n')
    return out.error = "the text does not end in a newline", out;
  std::istringstream in(text);
  std::string line, current;  // the family whose lines are being read
  std::set<std::string> finished, helped, seen;
  size_t n = 0;
  auto fail = [&](const std::string& why) {
    out.error = "line " + std::to_string(n) + ": " + why + ": " + line;
    return out;
  };
  auto enter = [&](const std::string& family) {
    if (family == current) return true;
    if (finished.count(family)) return false;  // a family's lines must be together
    if (!current.empty()) finished.insert(current);
    current = family;
    return true;
  };
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream words(line.substr(1));
      std::string kind, name;
      words >> kind >> name;
      if (kind != "HELP" && kind != "TYPE") continue;  // a comment
      if (!prom_name(name, false)) return fail("bad metric name");
      if (!enter(name)) return fail("family's lines are not together");
      if (kind == "HELP") {
        if (!helped.insert(name).second) return fail("second HELP");
        const size_t at = line.find(name) + name.size();
        const std::string help = at < line.size() ? line.substr(at + 1) : "";
        for (size_t i = 0; i < help.size(); ++i)
          if (help[i] == '\\' &&
              (i + 1 == help.size() || (help[i + 1] != '\\' && help[i + 1] != 'n')))
            return fail("bad escape in HELP");
          else if (help[i] == '\\')
            ++i;
      } else {
        std::string type, rest;
        words >> type >> rest;
        if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" &&
            type != "untyped")
          return fail("unknown type");
        if (!rest.empty()) return fail("text after the type");
        if (out.types.count(name)) return fail("second TYPE");
        if (seen.count(name)) return fail("TYPE after the family's samples");
        out.types[name] = type;
      }
      continue;
    }
    PromSample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (!prom_name(s.name, false)) return fail("bad metric name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == std::string::npos) return fail("label without =");
        const std::string key = line.substr(i, eq - i);
        if (!prom_name(key, true)) return fail("bad label name '" + key + "'");
        if (eq + 1 >= line.size() || line[eq + 1] != '"') return fail("label value not quoted");
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\') {
            if (++j == line.size()) return fail("label value ends in a backslash");
            if (line[j] == 'n')
              value += '\n';
            else if (line[j] == '\\' || line[j] == '"')
              value += line[j];
            else
              return fail("bad escape in a label value");
          } else {
            value += line[j];
          }
        }
        if (j == line.size()) return fail("label value not closed");
        if (!s.labels.emplace(key, value).second) return fail("label '" + key + "' twice");
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i == line.size()) return fail("labels not closed");
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') return fail("no value");
    std::istringstream rest(line.substr(i + 1));
    std::string value_text, timestamp, extra;
    rest >> value_text >> timestamp >> extra;
    if (!prom_value(value_text, s.value)) return fail("bad value '" + value_text + "'");
    if (!extra.empty()) return fail("text after the timestamp");
    const std::string family = prom_family(s.name, out.types);
    if (!enter(family)) return fail("family's lines are not together");
    seen.insert(family);
    for (const PromSample& o : out.samples)
      if (o.name == s.name && o.labels == s.labels) return fail("the same sample twice");
    const std::string type = out.types.count(family) ? out.types.at(family) : "untyped";
    if (type == "counter" && !(s.value >= 0)) return fail("a counter below zero");
    if (type == "histogram" && s.name == family + "_bucket" && !s.labels.count("le"))
      return fail("a bucket without le");
    if (type == "histogram" && s.name == family) return fail("a histogram sample without a suffix");
    out.samples.push_back(s);
  }
  // Histograms: per label set, le rising, counts not falling, +Inf last and equal to _count.
  for (const auto& [family, type] : out.types) {
    if (type != "histogram") continue;
    std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> buckets;
    for (const PromSample& s : out.samples) {
      if (s.name != family + "_bucket") continue;
      auto labels = s.labels;
      double le = 0;
      if (!prom_value(labels["le"], le)) return out.error = family + ": bad le", out;
      labels.erase("le");
      buckets[labels].emplace_back(le, s.value);
    }
    for (const auto& [labels, b] : buckets) {
      for (size_t k = 1; k < b.size(); ++k)
        if (!(b[k].first > b[k - 1].first) || b[k].second < b[k - 1].second)
          return out.error = family + ": buckets not rising", out;
      if (b.empty() || !std::isinf(b.back().first))
        return out.error = family + ": no +Inf bucket", out;
      double count = NAN;
      for (const PromSample& s : out.samples)
        if (s.name == family + "_count" && s.labels == labels) count = s.value;
      if (count != b.back().second)
        return out.error = family + ": _count is not the +Inf bucket", out;
    }
  }
  return out;
}

}  // namespace colony::test
