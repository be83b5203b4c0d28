// colony: train sparse CTR models on a parameter server built from actors.
#include <malloc.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "cli/commands.h"

namespace colony::cli {

void add_format_option(CLI::App* cmd, std::optional<DataFormat>& format) {
  cmd->add_option_function<std::string>(
         "--format", [&format](const std::string& text) { format = *parse_format_flag(text); },
         "Input text format: auto (from the content; a .libffm name is libffm), libsvm, libffm "
         "or criteo")
      ->check(CLI::IsMember({"auto", "libsvm", "libffm", "criteo"}));
}

void add_tiered_store_flags(CLI::App* cmd, std::string& eviction, bool& read_ahead) {
  cmd->add_option("--eviction", eviction, "Tiered store's eviction policy: lfu or lru")
      ->check(CLI::IsMember({"lfu", "lru"}))
      ->capture_default_str();
  cmd->add_flag("--read-ahead", read_ahead,
                "Tiered store: read the rows of pulls waiting for slower workers on an I/O thread "
                "while they wait (docs/storage.md)");
}

Status set_tiered_store_flags(StoreSpec& store, const std::string& eviction, bool read_ahead) {
  auto policy = parse_eviction_policy(eviction);
  if (!policy) return policy.status();
  store.policy = *policy;
  return set_read_ahead(store, read_ahead);
}

Expected<uint32_t> parse_replicated(const std::string& flag, const std::string& text,
                                    uint32_t max) {
  const std::string prefix = "replicated:", k = text.substr(std::min(text.size(), prefix.size()));
  if (text.rfind(prefix, 0) != 0 || k.empty() || k.size() > 4 ||
      k.find_first_not_of("0123456789") != std::string::npos || std::stoul(k) < 2 ||
      std::stoul(k) > max)
    return Status::invalid_input(fmt::format(
        "{} {}: replicated:K takes K from 2 to {} replicas of each shard", flag, text, max));
  return static_cast<uint32_t>(std::stoul(k));
}

int fail(const Status& status) {
  std::fprintf(stderr, "colony: error: %s\n", status.message().c_str());
  return status.is_user_error() ? 2 : 1;
}

uint64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

bool write_file(const std::string& flag, const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text << "\n";
  out.close();
  if (!out) {
    std::fprintf(stderr, "colony: error: %s %s: cannot write the file\n", flag.c_str(),
                 path.c_str());
    return false;
  }
  return true;
}

bool write_report(const std::string& path, const std::string& json_text) {
  return write_file("--report", path, json_text);
}

namespace {

CLI::Validator number_at_least(double floor, bool floor_allowed, const char* what,
                               const char* name) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) ||
            !(floor_allowed ? value >= floor : value > floor))
          return fmt::format("must be a number {}, not {}", what, text);
        return {};
      },
      name, name);
}

}  // namespace

CLI::Validator positive_number() {
  return number_at_least(0, false, "above 0", "POSITIVE");
}
CLI::Validator non_negative_number() {
  return number_at_least(0, true, "0 or above", "NONNEGATIVE");
}

void add_config_option(CLI::App* cmd) {
  cmd->add_option(
      "--config",
      "Read flags from this TOML file (keys: the flag names without --; the command line wins)");
}

void apply_config_file(CLI::App* cmd) {
  CLI::Option* config = cmd->get_option_no_throw("--config");
  if (config == nullptr || config->count() == 0) return;
  const std::string path = config->as<std::string>();
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::Error& e) {
    throw CLI::ValidationError("--config", path + ": " + e.what());
  }
  for (const CLI::ConfigItem& item : items) {
    if (!item.parents.empty() && !(item.parents.size() == 1 && item.parents[0] == cmd->get_name()))
      throw CLI::ValidationError("--config", path + ": section [" +
                                                 CLI::detail::join(item.parents, ".") +
                                                 "] is not [" + cmd->get_name() + "]");
    if (item.name == "config")
      throw CLI::ValidationError("--config", path + ": a config file cannot name another");
    CLI::Option* op = cmd->get_option_no_throw("--" + item.name);
    if (op == nullptr)
      throw CLI::ValidationError(
          "--config", path + ": \"" + item.name + "\" is not a flag of colony " + cmd->get_name());
    if (op->count() > 0) continue;  // given on the command line
    for (const std::string& v : item.inputs) op->add_result(v);
    try {
      op->run_callback();
    } catch (const CLI::Error& e) {
      throw CLI::ValidationError("--config", path + ": " + item.name + ": " + e.what());
    }
  }
}

}  // namespace colony::cli

int main(int argc, char** argv) {
  using namespace colony::cli;
  // Wire messages of megabytes (rows, gradients) are allocated and freed per message. By
  // default glibc serves such blocks with mmap and gives them back with munmap, so every message
  // page-faults and zero-fills its memory afresh: measured with `colony bench wire`, that was
  // most of the time at 64 floats x 10,000 keys. Keep freed blocks in the heap for reuse.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest allowed value
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  CLI::App app{"colony: train sparse CTR models on a parameter server built from actors"};
  app.require_subcommand(1);
  app.fallthrough(false);
  Runner gen = add_gen(app);
  Runner train = add_train(app);
  Runner bench = add_bench(app);
  Runner keygen = add_keygen(app);
  Runner coordinator = add_coordinator(app);
  Runner ps = add_ps(app);
  Runner worker = add_worker(app);
  Runner checkpoint = add_checkpoint(app);
  Runner export_rows = add_export(app);
  Runner sim = add_sim(app);
  Runner profile = add_profile(app);
  try {
    app.parse(argc, argv);
    for (CLI::App* sub : app.get_subcommands()) apply_config_file(sub);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;  // --help exits 0; every usage error exits 2
  }
  if (app.got_subcommand("gen")) return gen();
  if (app.got_subcommand("train")) return train();
  if (app.got_subcommand("bench")) return bench();
  if (app.got_subcommand("keygen")) return keygen();
  if (app.got_subcommand("coordinator")) return coordinator();
  if (app.got_subcommand("ps")) return ps();
  if (app.got_subcommand("worker")) return worker();
  if (app.got_subcommand("checkpoint")) return checkpoint();
  if (app.got_subcommand("export")) return export_rows();
  if (app.got_subcommand("sim")) return sim();
  if (app.got_subcommand("profile")) return profile();
  return 2;
}
