#include "cli/model_flags.h"

#include <fmt/format.h>

#include "actors/embedded_cluster.h"
#include "cli/commands.h"

namespace colony::cli {

void add_model_flags(CLI::App* cmd, ModelFlags& f, const std::string& fields_help) {
  cmd->add_option("--model", f.model, "lr, fm, deepfm, dlrm or dcn (deep models: docs/models.md)")
      ->capture_default_str();
  f.dim_option = cmd->add_option("--dim", f.spec.dim, "FM factor and embedding dimension")
                     ->check(CLI::Range(size_t{1}, max_fm_dim))
                     ->capture_default_str();
  f.mlp_option = cmd->add_option(
      "--mlp", f.mlp,
      "Hidden layers of the deep tower (deepfm, dcn) or DLRM's top MLP, e.g. 256,128 "
      "(default 256,128; none: no hidden layer)");
  f.bottom_option =
      cmd->add_option("--bottom", f.bottom, "DLRM's bottom MLP hidden layers (default 64)");
  f.cross_layers_option =
      cmd->add_option("--cross-layers", f.spec.cross_layers, "DCN-v2's cross layers")
          ->check(CLI::Range(size_t{1}, size_t{16}))
          ->capture_default_str();
  f.deep_only = {f.mlp_option, f.bottom_option, f.cross_layers_option};
  f.deep_only.push_back(cmd->add_option("--fields", f.spec.fields,
                                        "Fields of a deep model's input (0: one more than the "
                                        "highest field in " +
                                            fields_help + ")")
                            ->check(CLI::Range(size_t{0}, max_fields)));
  f.deep_only.push_back(
      cmd->add_option("--dense-optimizer", f.dense_optimizer,
                      "Optimizer of a deep model's dense layers: adam, adamw or sgd (momentum 0.9)")
          ->capture_default_str());
  f.deep_only.push_back(
      cmd->add_option("--dense-lr", f.dense_lr, "Step size of the dense optimizer")
          ->check(positive_number())
          ->capture_default_str());
  f.deep_only.push_back(
      cmd->add_option("--dense-weight-decay", f.dense_weight_decay,
                      "Weight decay of the dense optimizer: decoupled for adamw, an L2 term added "
                      "to the gradient for adam and sgd")
          ->check(non_negative_number())
          ->capture_default_str());
  f.dense_sync_option =
      cmd->add_option("--dense-sync", f.dense_sync,
                      "How the workers keep a deep model's dense layers equal: every:1 (an "
                      "all-reduce of the gradients every step) or every:K (each worker steps on "
                      "its own gradients; the workers average their parameters every K steps). "
                      "Not for --engine local, which has one copy")
          ->capture_default_str();
  f.deep_only.push_back(f.dense_sync_option);
}

Expected<ParsedModel> parse_model_flags(const ModelFlags& f) {
  ParsedModel p;
  auto kind = parse_model(f.model);
  if (!kind) return Status::invalid_input("--model: " + kind.status().message());
  p.spec = f.spec;
  p.spec.kind = *kind;
  p.spec = with_model_defaults(p.spec);
  // LR and FM take keys of any field; their spec keeps one field slot, as ModelSpec's default.
  p.spec.fields = p.spec.deep() ? f.spec.fields : 1;
  if (f.cross_layers_option->count() > 0) p.spec.cross_layers = f.spec.cross_layers;
  if (!p.spec.deep())
    for (const CLI::Option* flag : f.deep_only)
      if (flag->count() > 0)
        return Status::invalid_input(
            fmt::format("{} sets dense layers, which --model {} does not have (deepfm, dlrm and "
                        "dcn do)",
                        flag->get_name(), to_string(p.spec.kind)));
  if (f.mlp_option->count() > 0) {
    auto sizes = parse_layer_sizes(f.mlp);
    if (!sizes) return Status::invalid_input("--mlp " + sizes.status().message());
    p.spec.mlp = *sizes;
  }
  if (f.bottom_option->count() > 0) {
    auto sizes = parse_layer_sizes(f.bottom);
    if (!sizes) return Status::invalid_input("--bottom " + sizes.status().message());
    p.spec.bottom = *sizes;
  }
  auto dense_opt = nn::parse_dense_optimizer(f.dense_optimizer);
  if (!dense_opt)
    return Status::invalid_input("--dense-optimizer: " + dense_opt.status().message());
  p.dense_optimizer.kind = *dense_opt;
  p.dense_optimizer.lr = f.dense_lr;
  p.dense_optimizer.weight_decay = f.dense_weight_decay;
  auto sync = parse_dense_sync(f.dense_sync);
  if (!sync) return Status::invalid_input("--dense-sync: " + sync.status().message());
  p.dense_sync_every = *sync;
  return p;
}

void report_model(nlohmann::json& rep, const ModelSpec& spec,
                  const nn::DenseOptimizerConfig& dense_optimizer, uint32_t sync_every) {
  if (!spec.deep()) return;
  rep["fields"] = spec.fields;
  rep["dense_features"] = spec.dense;
  rep["mlp"] = layer_sizes_text(spec.mlp);
  if (spec.kind == ModelKind::dlrm) rep["bottom"] = layer_sizes_text(spec.bottom);
  if (spec.kind == ModelKind::dcn) rep["cross_layers"] = spec.cross_layers;
  rep["dense_optimizer"] = nn::to_string(dense_optimizer.kind);
  rep["dense_lr"] = dense_optimizer.lr;
  rep["dense_weight_decay"] = dense_optimizer.weight_decay;
  if (sync_every > 0) rep["dense_sync"] = fmt::format("every:{}", sync_every);
}

}  // namespace colony::cli
