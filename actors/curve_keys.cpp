#include "actors/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace colony {

namespace {

namespace fs = std::filesystem;

// Key files are one line; authorized_keys is at most authorized_keys_max lines of one key
// (with room for comments). Larger files are not what we wrote.
constexpr uintmax_t key_file_bytes_max = 4096;
constexpr uintmax_t authorized_keys_bytes_max = uintmax_t{8} << 20;

std::string errno_text(int err) {
  return std::strerror(err);
}

// Creates `path` (which must not exist) holding `text`, with `mode` before the umask.
Status write_new_file(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    return Status::io_error(fmt::format("{}: cannot create: {}", path, errno_text(errno)));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Status::io_error(fmt::format("{}: cannot write: {}", path, errno_text(err)));
    }
    done += static_cast<size_t>(n);
  }
  // A secret key that is not on disk after keygen reported success would be a bad surprise.
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::io_error(fmt::format("{}: cannot sync: {}", path, errno_text(err)));
  }
  if (::close(fd) != 0)
    return Status::io_error(fmt::format("{}: cannot close: {}", path, errno_text(errno)));
  return Status();
}

Expected<std::string> read_small_file(const std::string& path, uintmax_t bytes_max) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return Status::not_found(fmt::format("{}: no such file", path));
  if (!fs::is_regular_file(st))
    return Status::invalid_input(fmt::format("{}: not a regular file", path));
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return Status::io_error(fmt::format("{}: cannot stat: {}", path, ec.message()));
  if (size > bytes_max)
    return Status::invalid_input(
        fmt::format("{}: {} bytes, more than the {} a key file may have", path, size, bytes_max));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(fmt::format("{}: cannot open: {}", path, errno_text(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::io_error(fmt::format("{}: cannot read", path));
  return text.str();
}

// Lines without their terminator (and without a trailing '\r').
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

std::string trim(const std::string& s) {
  const char* space = " \t";
  const size_t first = s.find_first_not_of(space);
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

// Why `line` is not a Z85 key, or empty when it is one.
std::string key_line_problem(const std::string& line) {
  if (line.size() != curve_key_z85_chars)
    return fmt::format("expected a {}-character Z85 CURVE key, got {} characters",
                       curve_key_z85_chars, line.size());
  if (!is_curve_key_z85(line)) return "not valid Z85 (a character outside the Z85 alphabet?)";
  return {};
}

// The one key a .key or .pub file holds.
Expected<std::string> read_single_key(const std::string& path) {
  auto text = read_small_file(path, key_file_bytes_max);
  if (!text) return text.status();
  const std::vector<std::string> lines = split_lines(*text);
  std::string key;
  size_t key_line = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string line = trim(lines[i]);
    if (line.empty() || line.front() == '#') continue;
    if (key_line != 0)
      return Status::invalid_input(fmt::format(
          "{}:{}: a key file holds one key; another started on line {}", path, i + 1, key_line));
    if (std::string problem = key_line_problem(line); !problem.empty())
      return Status::invalid_input(fmt::format("{}:{}: {}", path, i + 1, problem));
    key = line;
    key_line = i + 1;
  }
  if (key_line == 0) return Status::invalid_input(fmt::format("{}:1: the file holds no key", path));
  return key;
}

}  // namespace

CurveKeyPair generate_curve_key_pair() {
  std::array<char, curve_key_z85_chars + 1> public_key{};
  std::array<char, curve_key_z85_chars + 1> secret_key{};
  const int rc = zmq_curve_keypair(public_key.data(), secret_key.data());
  COLONY_ASSERT(rc == 0, "zmq_curve_keypair failed: {} (libzmq built without CURVE?)",
                zmq_strerror(zmq_errno()));
  return CurveKeyPair{std::string(public_key.data()), std::string(secret_key.data())};
}

bool is_curve_key_z85(const std::string& z85) {
  if (z85.size() != curve_key_z85_chars) return false;
  std::array<uint8_t, curve_key_bytes> bytes{};
  return zmq_z85_decode(bytes.data(), z85.c_str()) != nullptr;
}

Expected<std::string> curve_public_key(const std::string& secret_z85) {
  if (!is_curve_key_z85(secret_z85))
    return Status::invalid_input("the secret key is not a 40-character Z85 CURVE key");
  std::array<char, curve_key_z85_chars + 1> public_key{};
  if (zmq_curve_public(public_key.data(), secret_z85.c_str()) != 0)
    return Status::invalid_input(
        fmt::format("cannot derive a public key: {}", zmq_strerror(zmq_errno())));
  return std::string(public_key.data());
}

Status write_cluster_keys(const std::string& dir, size_t nodes) {
  return write_cluster_keys(dir, ClusterKeyCounts{nodes, 0, 0});
}

Status write_cluster_keys(const std::string& dir, const ClusterKeyCounts& counts) {
  const size_t total = counts.nodes + counts.ps + counts.workers;
  if (total == 0 || total > cluster_key_nodes_max)
    return Status::invalid_input(
        fmt::format("key directory {}: the member keys must number 1..{}, got {}", dir,
                    cluster_key_nodes_max, total));
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st))
      return Status::invalid_input(
          fmt::format("key directory {} exists and is not a directory", dir));
    if (!fs::is_empty(dir, ec) || ec)
      return Status::invalid_input(fmt::format(
          "key directory {} exists and is not empty; refusing to overwrite keys (choose a new "
          "directory or remove this one)",
          dir));
  } else {
    const fs::path parent = fs::path(dir).parent_path();
    if (!parent.empty()) {
      fs::create_directories(parent, ec);
      if (ec)
        return Status::io_error(fmt::format("cannot create {}: {}", parent.string(), ec.message()));
    }
    if (::mkdir(dir.c_str(), 0700) != 0)
      return Status::io_error(
          fmt::format("cannot create key directory {}: {}", dir, errno_text(errno)));
  }
  // An existing empty directory, or one the umask narrowed: exactly owner-only either way.
  if (::chmod(dir.c_str(), 0700) != 0)
    return Status::io_error(fmt::format("cannot set mode 0700 on {}: {}", dir, errno_text(errno)));

  std::string authorized;  // server first, then ps-0.., worker-0.., node-0..
  auto write_pair = [&](const std::string& name, const char* role) -> Status {
    const CurveKeyPair pair = generate_curve_key_pair();
    const std::string base = (fs::path(dir) / name).string();
    if (Status s = write_new_file(base + ".key", pair.secret_z85 + "\n", 0600); !s.ok()) return s;
    if (Status s = write_new_file(base + ".pub", pair.public_z85 + "\n", 0644); !s.ok()) return s;
    authorized += pair.public_z85 + (*role ? std::string(" ") + role : std::string()) + "\n";
    return Status();
  };
  if (Status s = write_pair("server", "coordinator"); !s.ok()) return s;
  for (size_t i = 0; i < counts.ps; ++i)
    if (Status s = write_pair(fmt::format("ps-{}", i), "ps"); !s.ok()) return s;
  for (size_t i = 0; i < counts.workers; ++i)
    if (Status s = write_pair(fmt::format("worker-{}", i), "worker"); !s.ok()) return s;
  for (size_t i = 0; i < counts.nodes; ++i)
    if (Status s = write_pair(fmt::format("node-{}", i), ""); !s.ok()) return s;
  return write_new_file((fs::path(dir) / "authorized_keys").string(), authorized, 0644);
}

Expected<CurveKeyPair> read_key_pair(const std::string& dir, const std::string& name) {
  const std::string base = (fs::path(dir) / name).string();
  auto secret = read_single_key(base + ".key");
  if (!secret) return secret.status();
  auto public_key = read_single_key(base + ".pub");
  if (!public_key) return public_key.status();
  auto derived = curve_public_key(*secret);
  if (!derived)
    return Status::invalid_input(fmt::format("{}.key: {}", base, derived.status().message()));
  if (*derived != *public_key)
    return Status::invalid_input(
        fmt::format("{}.pub does not hold the public key of {}.key", base, base));
  return CurveKeyPair{std::move(*public_key), std::move(*secret)};
}

Expected<std::string> read_public_key(const std::string& dir, const std::string& name) {
  return read_single_key((fs::path(dir) / (name + ".pub")).string());
}

Expected<std::vector<AuthorizedKey>> read_authorized_key_roles(const std::string& dir) {
  const std::string path = (fs::path(dir) / "authorized_keys").string();
  auto text = read_small_file(path, authorized_keys_bytes_max);
  if (!text) return text.status();
  const std::vector<std::string> lines = split_lines(*text);
  std::vector<AuthorizedKey> keys;
  std::set<std::string> seen;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string line = trim(lines[i]);
    if (line.empty() || line.front() == '#') continue;
    const size_t space = line.find_first_of(" \t");
    const std::string key = line.substr(0, space);
    const std::string role = space == std::string::npos ? std::string() : trim(line.substr(space));
    if (std::string problem = key_line_problem(key); !problem.empty())
      return Status::invalid_input(fmt::format("{}:{}: {}", path, i + 1, problem));
    AuthorizedKey k{key, KeyRole::any_member};
    if (role == "coordinator")
      k.role = KeyRole::coordinator;
    else if (role == "ps")
      k.role = KeyRole::ps;
    else if (role == "worker")
      k.role = KeyRole::worker;
    else if (!role.empty())
      return Status::invalid_input(
          fmt::format("{}:{}: the role after the key must be coordinator, ps or worker, got \"{}\"",
                      path, i + 1, role));
    if (!seen.insert(key).second)
      return Status::invalid_input(fmt::format("{}:{}: the key is listed twice", path, i + 1));
    if (keys.size() == authorized_keys_max)
      return Status::invalid_input(
          fmt::format("{}:{}: more than {} keys", path, i + 1, authorized_keys_max));
    keys.push_back(std::move(k));
  }
  if (keys.empty()) return Status::invalid_input(fmt::format("{}: lists no keys", path));
  return keys;
}

Expected<std::vector<std::string>> read_authorized_keys(const std::string& dir) {
  auto roles = read_authorized_key_roles(dir);
  if (!roles) return roles.status();
  std::vector<std::string> keys;
  for (AuthorizedKey& k : *roles) keys.push_back(std::move(k.public_z85));
  return keys;
}

}  // namespace colony
