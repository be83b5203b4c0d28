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
  size_t ps = 0;
  size_t workers = 0;
};

}  // namespace

Runner add_keygen(CLI::App& app) {
  auto o = std::make_shared<KeygenOptions>();
  CLI::App* cmd = app.add_subcommand("keygen", "Generate CURVE keys for a cluster's links");
  cmd->add_option("--out", o->out_dir, "Key directory (created 0700; must not hold files)")
      ->required();
  CLI::Option* nodes =
      cmd->add_option(
             "--nodes", o->nodes,
             "Member key pairs (node-<i>) that may join as ps or worker; 0 by default when --ps or "
             "--workers is given")
          ->check(CLI::Range(size_t{0}, cluster_key_nodes_max))
          ->capture_default_str();
  cmd->add_option("--ps", o->ps, "Key pairs (ps-<i>) that may join only as ps members")
      ->check(CLI::Range(size_t{0}, cluster_key_nodes_max));
  cmd->add_option("--workers", o->workers,
                  "Key pairs (worker-<i>) that may join only as worker members")
      ->check(CLI::Range(size_t{0}, cluster_key_nodes_max));
  return [o, nodes]() {
    if ((o->ps > 0 || o->workers > 0) && nodes->count() == 0) o->nodes = 0;
    if (Status s = write_cluster_keys(o->out_dir, ClusterKeyCounts{o->nodes, o->ps, o->workers});
        !s.ok())
      return fail(s);
    std::printf("wrote %s/server.key, %s/server.pub (the coordinator's)\n", o->out_dir.c_str(),
                o->out_dir.c_str());
    const std::pair<const char*, size_t> kinds[] = {
        {"ps", o->ps}, {"worker", o->workers}, {"node", o->nodes}};
    for (const auto& [name, n] : kinds)
      if (n > 0)
        std::printf("wrote %s/%s-<i>.key, %s/%s-<i>.pub for i in 0..%zu\n", o->out_dir.c_str(),
                    name, o->out_dir.c_str(), name, n - 1);
    std::printf("wrote %s/authorized_keys (%zu public keys, each with its role)\n",
                o->out_dir.c_str(), o->nodes + o->ps + o->workers + 1);
    std::printf("keep the .key files secret: they are mode 0600\n");
    return 0;
  };
}

}  // namespace colony::cli
