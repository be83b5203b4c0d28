// The model flags `colony train` and `colony coordinator` share: --model, --dim, and a deep
// model's layers, input fields, dense optimizer and dense sync (docs/models.md).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "models/dense_optimizer.h"
#include "models/model.h"

namespace colony::cli {

struct ModelFlags {
  std::string model = "fm";
  ModelSpec spec{ModelKind::fm, 8, 0};  // --dim, --fields (0: detect), --cross-layers
  std::string mlp, bottom;              // when given; the model's default otherwise
  std::string dense_optimizer = "adam";
  float dense_lr = 1e-3f;
  float dense_weight_decay = 0.0f;
  std::string dense_sync = "every:1";
  // Flags that only the deep models take (refused with lr and fm, which have no dense layers).
  std::vector<CLI::Option*> deep_only;
  CLI::Option* dim_option = nullptr;
  CLI::Option* mlp_option = nullptr;
  CLI::Option* bottom_option = nullptr;
  CLI::Option* cross_layers_option = nullptr;
  CLI::Option* dense_sync_option = nullptr;
};

// Adds the flags to `cmd`; `fields_help` says where --fields 0 detects the fields from.
void add_model_flags(CLI::App* cmd, ModelFlags& flags, const std::string& fields_help);

struct ParsedModel {
  ModelSpec spec;  // with the model's defaults for the layers not given; fields 0: detect
  nn::DenseOptimizerConfig dense_optimizer;
  uint32_t dense_sync_every = 1;
};
// The flags' meaning. invalid_input naming the flag for an unknown model, a bad layer list,
// dense optimizer or --dense-sync, or a deep-model flag given with lr or fm.
Expected<ParsedModel> parse_model_flags(const ModelFlags& flags);

// A deep model's report keys (nothing for LR and FM): fields, dense_features, mlp, bottom
// (DLRM), cross_layers (DCN-v2), dense_optimizer, dense_lr, dense_weight_decay and, when the
// workers sync (sync_every > 0), dense_sync.
void report_model(nlohmann::json& report, const ModelSpec& spec,
                  const nn::DenseOptimizerConfig& dense_optimizer, uint32_t sync_every);

}  // namespace colony::cli
