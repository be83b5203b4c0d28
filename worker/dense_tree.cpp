#include "worker/dense_tree.h"

#include <algorithm>

namespace colony {

Expected<DenseTree> DenseTree::make(const DenseTreeConfig& config, Reducer& reducer) {
  if (config.children.empty())
    return Status::invalid_input("a dense all-reduce node needs at least one child");
  if (config.params == 0)
    return Status::invalid_input("a dense all-reduce of a model with no dense parameters");
  std::vector<NodeId> sorted = config.children;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return Status::invalid_input("a dense all-reduce node lists a child twice");
  return DenseTree(config, reducer);
}

DenseTree::DenseTree(const DenseTreeConfig& config, Reducer& reducer)
    : config_(config),
      reducer_(&reducer),
      child_last_(config.children.size(), -1),
      child_done_(config.children.size(), false),
      final_(config.children.size()) {
  for (size_t i = 0; i < config.children.size(); ++i) child_index_[config.children[i]] = i;
}

Status DenseTree::on_reduce(const DenseReduce& m, uint64_t map_version, Outbox& out) {
  auto it = child_index_.find(m.header.sender);
  if (it == child_index_.end())
    return Status::internal(
        fmt::format("dense all-reduce at node {}: DenseReduce from node {}, "
                    "which is not a child",
                    config_.id, m.header.sender));
  const size_t c = it->second;
  if (child_done_[c])
    return Status::internal(fmt::format(
        "dense all-reduce at node {}: DenseReduce for step {} from node {} after it finished",
        config_.id, m.step, m.header.sender));
  const bool final = m.step == clock_done;
  if (!final && int64_t{m.step} <= child_last_[c])
    return Status::internal(
        fmt::format("dense all-reduce at node {}: node {} sent step {} after step {}", config_.id,
                    m.header.sender, m.step, child_last_[c]));
  // A final contribution may be empty (gradient all-reduce); any other has every parameter.
  if (m.values.size() != config_.params && !(final && m.values.empty()))
    return Status::internal(
        fmt::format("dense all-reduce at node {}: {} floats from node {} for step {}, expected {}",
                    config_.id, m.values.size(), m.header.sender, m.step, config_.params));
  // A child waits for a step's broadcast before it sends the next: at most one pending each.
  if (child_last_[c] >= 0) {
    auto p = pending_.find(static_cast<uint32_t>(child_last_[c]));
    if (p != pending_.end() && p->second[c])
      return Status::internal(fmt::format(
          "dense all-reduce at node {}: node {} sent step {} before step {} was reduced",
          config_.id, m.header.sender, m.step, child_last_[c]));
  }
  Contribution contribution{m.samples, {m.values.begin(), m.values.end()}};
  if (final) {
    child_done_[c] = true;
    if (!contribution.values.empty()) final_[c] = std::move(contribution);
  } else {
    child_last_[c] = m.step;
    auto& slots = pending_[m.step];
    slots.resize(config_.children.size());
    slots[c] = std::move(contribution);
  }
  flush(map_version, out);
  return Status();
}

void DenseTree::flush(uint64_t map_version, Outbox& out) {
  while (!pending_.empty()) {
    auto it = pending_.begin();
    for (size_t c = 0; c < config_.children.size(); ++c)
      if (!it->second[c] && !child_done_[c]) return;
    reduce(it->first, it->second, map_version, out);
    pending_.erase(it);
  }
  if (final_sent_ || !std::all_of(child_done_.begin(), child_done_.end(), [](bool d) { return d; }))
    return;
  final_sent_ = true;
  if (std::any_of(final_.begin(), final_.end(), [](const auto& f) { return f.has_value(); })) {
    reduce(clock_done, final_, map_version, out);
  } else if (config_.parent) {
    out.push_back({*config_.parent,
                   DenseReduce{{config_.id, next_request_++, map_version}, clock_done, 0, {}}});
  }
}

void DenseTree::reduce(uint32_t step, std::vector<std::optional<Contribution>>& slots,
                       uint64_t map_version, Outbox& out) {
  std::vector<std::span<const float>> inputs;
  std::vector<size_t> contributors;
  uint64_t samples = 0;
  for (size_t c = 0; c < slots.size(); ++c) {
    if (!slots[c]) continue;
    inputs.emplace_back(slots[c]->values);
    contributors.push_back(c);
    samples += slots[c]->samples;
  }
  sum_.resize(config_.params);
  reducer_->sum_dense(inputs, sum_);
  ++steps_reduced_;
  if (config_.parent) {
    waiting_[step] = std::move(contributors);
    out.push_back(
        {*config_.parent,
         DenseReduce{
             {config_.id, next_request_++, map_version}, step, samples, std::vector<float>(sum_)}});
    return;
  }
  for (size_t c : contributors)
    out.push_back(
        {config_.children[c],
         DenseBroadcast{
             {config_.id, next_request_++, map_version}, step, samples, std::vector<float>(sum_)}});
}

Status DenseTree::on_broadcast(const DenseBroadcast& m, uint64_t map_version, Outbox& out) {
  if (!config_.parent || m.header.sender != *config_.parent)
    return Status::internal(fmt::format(
        "dense all-reduce at node {}: DenseBroadcast from node {}, which is not its parent",
        config_.id, m.header.sender));
  auto it = waiting_.find(m.step);
  if (it == waiting_.end() || m.values.size() != config_.params)
    return Status::internal(
        fmt::format("dense all-reduce at node {}: a DenseBroadcast of step {} ({} floats) that no "
                    "contribution of {} floats waits for",
                    config_.id, m.step, m.values.size(), config_.params));
  for (size_t c : it->second)
    out.push_back(
        {config_.children[c],
         DenseBroadcast{{config_.id, next_request_++, map_version}, m.step, m.samples, m.values}});
  waiting_.erase(it);
  return Status();
}

}  // namespace colony
