// colony checkpoint list|verify|restore: inspect and restore the checkpoints a job wrote
// (storage/checkpoint.h); colony export: write a checkpoint's rows for a serving system.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "storage/checkpoint.h"

namespace colony::cli {

namespace {
struct CheckpointArgs {
  std::string action;
  std::string dir;
  std::string store;
};

}  // namespace

Runner add_checkpoint(CLI::App& app) {
  auto a = std::make_shared<CheckpointArgs>();
  CLI::App* cmd = app.add_subcommand("checkpoint",
                                     "List, verify or restore checkpoints of a job's shard stores");
  cmd->add_option("action", a->action, "list, verify or restore")
      ->required()
      ->check(CLI::IsMember({"list", "verify", "restore"}));
  cmd->add_option("dir", a->dir,
                  "A checkpoint folder (DIR/checkpoints for --store rocksdb:DIR), or one step-<S> "
                  "folder in it "
                  "(verify and restore: default the newest complete one)")
      ->required();
  cmd->add_option("--store", a->store,
                  "restore: rocksdb:DIR to restore into (its shard-<i> folders must not exist)");
  return [a]() {
    if (a->action == "list") {
      auto all = list_checkpoints(a->dir);
      if (!all) return fail(all.status());
      for (const CheckpointListing& l : *all)
        std::printf("step %u  %s  %s\n", l.step, l.complete ? "complete" : "INCOMPLETE",
                    l.complete ? l.dir.c_str() : l.problem.c_str());
      if (all->empty()) std::printf("no checkpoints in %s\n", a->dir.c_str());
      return 0;
    }
    auto step = checkpoint_step(a->dir);
    if (!step) return fail(step.status());
    if (a->action == "verify") {
      auto rows = verify_checkpoint(*step);
      if (!rows) return fail(rows.status());
      const CheckpointManifest m = read_manifest(*step).value();
      std::printf("%s: ok, %llu rows%s\n", step->c_str(), static_cast<unsigned long long>(*rows),
                  m.dense_shape.empty() ? ""
                                        : fmt::format(", dense layers of {} parameters ({})",
                                                      m.dense_params, m.dense_shape)
                                              .c_str());
      return 0;
    }
    const std::string prefix = "rocksdb:";
    if (a->store.rfind(prefix, 0) != 0 || a->store.size() == prefix.size())
      return fail(
          Status::invalid_input("--store: restore needs rocksdb:DIR, the store to restore into"));
    if (Status s = restore_checkpoint(*step, a->store.substr(prefix.size())); !s.ok())
      return fail(s);
    std::printf("restored %s into %s\n", step->c_str(), a->store.c_str());
    return 0;
  };
}

namespace {
struct ExportArgs {
  std::string store;
  std::string out;
  uint32_t value_floats = 0;
};
}  // namespace

Runner add_export(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export",
                                     "Write every row of a checkpoint (or of a stopped job's "
                                     "store) to one binary file for serving");
  cmd->add_option(
         "--store", a->store,
         "A checkpoint folder (its newest complete step), one step-<S> folder, or a store folder "
         "holding shard-<i>/")
      ->required();
  cmd->add_option("--out", a->out, "The file to write (format: docs/storage.md)")->required();
  cmd->add_option(
      "--value-floats", a->value_floats,
      "Parameters at the front of a row (needed for a store folder; a checkpoint says)");
  return [a]() {
    std::string dir = a->store;
    if (!read_manifest(dir).ok()) {
      if (auto latest = latest_checkpoint(dir)) dir = *latest;
    }
    auto rows = export_rows(dir, a->value_floats, a->out);
    if (!rows) return fail(rows.status());
    std::printf("exported %llu rows from %s to %s\n", static_cast<unsigned long long>(*rows),
                dir.c_str(), a->out.c_str());
    return 0;
  };
}

}  // namespace colony::cli
