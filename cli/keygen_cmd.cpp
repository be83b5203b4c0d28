// colony keygen: CURVE keys for a cluster's authenticated links.
#include <cstdio>
#include <memory>
#include <string>

#include "actors/curve_keys.h"
#include "cli/commands.h"

namespace colony::cli {

namespace {

struct KeygenOptions {
  std::string out_dir;
  size_t nodes = 16;
};

}  // namespace

Runner add_keygen(CLI::App& app) {
  auto o = std::make_shared<KeygenOptions>();
  CLI::App* cmd = app.add_subcommand("keygen", "Generate CURVE keys for a cluster's links");
  cmd->add_option("--out", o->out_dir, "Key directory (created 0700; must not hold files)")
      ->required();
  cmd->add_option("--nodes", o->nodes, "Node key pairs to write, besides the server's")
      ->check(CLI::Range(size_t{1}, cluster_key_nodes_max))
      ->capture_default_str();
  return [o]() {
    if (Status s = write_cluster_keys(o->out_dir, o->nodes); !s.ok()) return fail(s);
    std::printf("wrote %s/server.key, %s/server.pub\n", o->out_dir.c_str(), o->out_dir.c_str());
    std::printf("wrote %s/node-<i>.key, %s/node-<i>.pub for i in 0..%zu\n", o->out_dir.c_str(),
                o->out_dir.c_str(), o->nodes - 1);
    std::printf("wrote %s/authorized_keys (%zu public keys)\n", o->out_dir.c_str(), o->nodes + 1);
    std::printf("keep the .key files secret: they are mode 0600\n");
    return 0;
  };
}

}  // namespace colony::cli
