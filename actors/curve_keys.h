// CURVE key pairs for authenticated ZeroMQ links, and the key directory `colony keygen` writes.
//
// A cluster key directory (mode 0700) holds:
//   server.key, server.pub        the coordinator-side server identity
//   ps-<i>.key, ps-<i>.pub        one identity per ps member, i in [0, ps)
//   worker-<i>.key, worker-<i>.pub  one identity per worker member, i in [0, workers)
//   node-<i>.key, node-<i>.pub    one identity per member of either role, i in [0, nodes)
//   authorized_keys               every public key above, one a line: the Z85 key, then the
//                                 role it may act in (coordinator, ps or worker); a key with
//                                 no role may join as ps or worker
// A key may only join in its role (CoordinatorCore checks), so a worker's key cannot pose as a
// ps; node keys are for small trusted setups that do not care which member is which.
// A .key file holds the Z85 secret key (mode 0600), a .pub file the Z85 public key; each is one
// line. authorized_keys may also hold blank lines and comment lines starting with '#': '#' is a
// Z85 digit, but the largest (84), and no 32-bit group's leading digit can exceed 82, so no key
// starts with it.
//
// All functions are safe to call from any thread; none keeps state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace colony {

// A CURVE key is 32 bytes, 40 characters in Z85.
inline constexpr size_t curve_key_bytes = 32;
inline constexpr size_t curve_key_z85_chars = 40;
// The most nodes one key directory is written for, and the most keys authorized_keys may list.
inline constexpr size_t cluster_key_nodes_max = 4096;
inline constexpr size_t authorized_keys_max = 65536;

struct CurveKeyPair {
  std::string public_z85;
  std::string secret_z85;
};

// A fresh key pair from libzmq's CSPRNG. libzmq built without CURVE is a broken installation
// (STACK.md requires it), so that is an assertion failure, not a Status.
CurveKeyPair generate_curve_key_pair();

// True when `z85` is 40 characters that decode to a 32-byte key.
bool is_curve_key_z85(const std::string& z85);

// The public key of a Z85 secret key; invalid_input when `secret_z85` is not a key.
Expected<std::string> curve_public_key(const std::string& secret_z85);

// How many key pairs of each kind write_cluster_keys writes, besides the server's.
struct ClusterKeyCounts {
  size_t nodes = 0;    // node-<i>: either member role
  size_t ps = 0;       // ps-<i>
  size_t workers = 0;  // worker-<i>
};

// Writes a fresh cluster key directory at `dir`, creating it and its parents. Fails with
// invalid_input naming `dir` when it exists and is not an empty directory (keys are never
// overwritten) or the counts add up to 0 or above cluster_key_nodes_max, and with io_error
// naming the file when creating or writing something fails (files written until then stay).
Status write_cluster_keys(const std::string& dir, const ClusterKeyCounts& counts);
// The same with `nodes` node keys.
Status write_cluster_keys(const std::string& dir, size_t nodes);

// The role an authorized key may act in.
enum class KeyRole : uint8_t { any_member, coordinator, ps, worker };
struct AuthorizedKey {
  std::string public_z85;
  KeyRole role = KeyRole::any_member;
};

// Reads `<dir>/<name>.key` and `<dir>/<name>.pub` (name e.g. "server" or "node-3"). Fails with
// not_found naming a missing file, invalid_input naming the file and line of anything that is
// not one Z85 key, and invalid_input when the public key does not belong to the secret key.
Expected<CurveKeyPair> read_key_pair(const std::string& dir, const std::string& name);

// Reads `<dir>/<name>.pub` alone (a peer's public key, e.g. "server"). Fails as read_key_pair.
Expected<std::string> read_public_key(const std::string& dir, const std::string& name);

// Reads `<dir>/authorized_keys`: the Z85 public keys in file order. Fails with not_found for a
// missing file and invalid_input naming the file and line of a line that is not one Z85 key
// (optionally followed by a role), or a file that lists no key or more than
// authorized_keys_max.
Expected<std::vector<std::string>> read_authorized_keys(const std::string& dir);
// The same with each key's role. Also fails with invalid_input, naming the file and line, for
// a role other than coordinator, ps or worker, or a key listed twice.
Expected<std::vector<AuthorizedKey>> read_authorized_key_roles(const std::string& dir);

}  // namespace colony
