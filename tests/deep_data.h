// The data and model shapes the deep models' cluster and recovery tests share: Criteo-shaped
// generated batches (26 fields, 13 dense features) and small deep models over them.
#pragma once

#include <memory>
#include <vector>

#include "data/generator.h"
#include "data/reader.h"
#include "models/model.h"

namespace colony::testing {

// `rows` generated rows (seed 7) in batches of `batch` rows, so that workers split the data
// batch by batch.
inline std::vector<Batch> deep_batches(uint64_t rows, size_t batch) {
  GenOptions g;
  g.rows = rows;
  g.test_rows = 10;
  g.seed = 7;
  g.vocab_scale = 0.01;
  g.format = "criteo";
  auto reader =
      make_memory_reader(std::make_shared<std::vector<Batch>>(generate_in_memory(g).train), batch);
  std::vector<Batch> out;
  Batch b;
  while (*reader->next(b)) out.push_back(b);
  return out;
}

// `kind` with dim 4, MLP 16,8, bottom MLP 8 and 2 cross layers over those batches.
inline ModelSpec small_deep_model(ModelKind kind) {
  ModelSpec spec;
  spec.kind = kind;
  spec.dim = 4;
  spec.fields = 26;
  spec.dense = 13;
  spec.mlp = {16, 8};
  spec.bottom = {8};
  spec.cross_layers = 2;
  return spec;
}

}  // namespace colony::testing
