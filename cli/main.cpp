// colony: train sparse CTR models on a parameter server built from actors.
#include <sys/resource.h>

#include <cstdio>
#include <fstream>

#include "cli/commands.h"

namespace colony::cli {

int fail(const Status& status) {
  std::fprintf(stderr, "colony: error: %s\n", status.message().c_str());
  return status.is_user_error() ? 2 : 1;
}

uint64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

bool write_report(const std::string& path, const std::string& json_text) {
  std::ofstream out(path);
  out << json_text << "\n";
  out.close();
  if (!out) {
    std::fprintf(stderr, "colony: error: --report %s: cannot write the report file\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace colony::cli

int main(int argc, char** argv) {
  using namespace colony::cli;
  CLI::App app{"colony: train sparse CTR models on a parameter server built from actors"};
  app.require_subcommand(1);
  app.fallthrough(false);
  Runner gen = add_gen(app);
  Runner train = add_train(app);
  Runner bench = add_bench(app);
  Runner keygen = add_keygen(app);
  Runner sim = add_sim(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;  // --help exits 0; every usage error exits 2
  }
  if (app.got_subcommand("gen")) return gen();
  if (app.got_subcommand("train")) return train();
  if (app.got_subcommand("bench")) return bench();
  if (app.got_subcommand("keygen")) return keygen();
  if (app.got_subcommand("sim")) return sim();
  return 2;
}
