// colony gen: synthetic Criteo-like data from a planted model.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/progress.h"
#include "data/generator.h"

namespace colony::cli {

Runner add_gen(CLI::App& app) {
  auto o = std::make_shared<GenOptions>();
  CLI::App* cmd = app.add_subcommand("gen", "Generate synthetic Criteo-like CTR data");
  cmd->add_option("--rows", o->rows, "Training rows")->required()->check(positive_number());
  cmd->add_option("--test-rows", o->test_rows, "Test rows")->required()->check(positive_number());
  cmd->add_option("--seed", o->seed, "Seed: same seed, same data")->required();
  cmd->add_option("--out", o->out_dir, "Output directory (created)")->required();
  cmd->add_option("--format", o->format, "libsvm, libffm (field:index:value) or criteo")
      ->check(CLI::IsMember({"libsvm", "libffm", "criteo"}))
      ->capture_default_str();
  cmd->add_option("--vocab-scale", o->vocab_scale,
                  "Scale every categorical vocabulary (0, 1]; 1 = Criteo-sized")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  auto planted = std::make_shared<std::string>("fm");
  cmd->add_option("--planted", *planted,
                  "The planted model labels come from: fm (linear and a low-rank FM interaction) "
                  "or deep (fm plus a random ReLU network over field embeddings and the integer "
                  "features, which no FM can express)")
      ->check(CLI::IsMember({"fm", "deep"}))
      ->capture_default_str();
  return [o, planted]() {
    o->planted = parse_planted(*planted).value();
    Progress progress(stderr);
    auto summary = generate_dataset(*o, [&](uint64_t done, uint64_t total) {
      progress.update(double(done) / double(total), double(done), "rows", "");
    });
    progress.finish();
    if (!summary) return fail(summary.status());
    std::printf(
        "wrote %s, %s, %s\nplanted_logloss_test %.5f  planted_auc_test %.4f  "
        "base_rate_logloss_test %.5f  positive_rate %.4f\n",
        summary->train_path.c_str(), summary->test_path.c_str(), summary->meta_path.c_str(),
        summary->planted_logloss_test, summary->planted_auc_test, summary->base_rate_logloss_test,
        summary->positive_rate);
    return 0;
  };
}

}  // namespace colony::cli
