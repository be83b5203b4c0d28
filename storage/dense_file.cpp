#include "storage/dense_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "common/hash.h"

namespace colony {

namespace fs = std::filesystem;

namespace {
constexpr char magic[8] = {'C', 'O', 'L', 'O', 'N', 'Y', 'D', '1'};
static_assert(std::endian::native == std::endian::little, "dense files are little-endian");

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Reads fixed-size fields from a byte range, remembering whether it ran out.
struct Cursor {
  const char* p;
  size_t left;
  template <typename T>
  bool get(T& v) {
    if (left < sizeof v) return false;
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    left -= sizeof v;
    return true;
  }
};

}  // namespace

Status sync_folder(const std::string& folder) {
  const fs::path dir(folder);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return Status::io_error(fmt::format("{}: cannot open: {}", dir.string(), std::strerror(errno)));
  const bool ok = ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok)
    return Status::io_error(fmt::format("{}: cannot sync: {}", dir.string(), std::strerror(saved)));
  return {};
}

namespace {
// fsync of one regular file, by path.
Status sync_file(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0)
    return Status::io_error(
        fmt::format("{}: cannot open: {}", file.string(), std::strerror(errno)));
  const bool ok = ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok)
    return Status::io_error(
        fmt::format("{}: cannot sync: {}", file.string(), std::strerror(saved)));
  return {};
}
}  // namespace

Status copy_folder_synced(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::copy(from, to, fs::copy_options::recursive, ec);
  if (ec)
    return Status::io_error(fmt::format("{}: cannot copy {} there: {}", to, from, ec.message()));
  // Every file, then every folder (which names them), the top one last.
  std::vector<fs::path> folders;
  for (auto it = fs::recursive_directory_iterator(to, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_directory(ec)) {
      folders.push_back(it->path());
    } else if (Status s = sync_file(it->path()); !s.ok()) {
      return s;
    }
  }
  if (ec) return Status::io_error(fmt::format("{}: cannot list: {}", to, ec.message()));
  for (auto f = folders.rbegin(); f != folders.rend(); ++f)
    if (Status s = sync_folder(f->string()); !s.ok()) return s;
  return sync_folder(to);
}

std::string dense_store_path(const std::string& store_dir) {
  return (fs::path(store_dir) / dense_file_name).string();
}

Status write_file_atomically(const std::string& path, const std::string& bytes) {
  const fs::path final_path(path);
  const fs::path tmp = final_path.string() + fmt::format(".tmp.{}", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return Status::io_error(
        fmt::format("{}: cannot create: {}", tmp.string(), std::strerror(errno)));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) break;
    done += size_t(n);
  }
  const bool written = done == bytes.size() && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  std::error_code ec;
  if (!written) {
    fs::remove(tmp, ec);
    return Status::io_error(
        fmt::format("{}: cannot write: {}", tmp.string(), std::strerror(saved)));
  }
  fs::rename(tmp, final_path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Status::io_error(
        fmt::format("{}: cannot rename into place: {}", final_path.string(), ec.message()));
  }
  return sync_folder(final_path.has_parent_path() ? final_path.parent_path() : fs::path("."));
}

Status write_dense_state(const std::string& path, const DenseState& s) {
  if (s.shape.size() > dense_shape_max)
    return Status::invalid_input(fmt::format("{}: a dense shape of {} bytes (at most {})", path,
                                             s.shape.size(), dense_shape_max));
  std::string out;
  out.reserve(64 + s.shape.size() + 4 * (s.params.size() + s.optimizer_state.size()));
  out.append(magic, sizeof magic);
  put(out, static_cast<uint32_t>(s.shape.size()));
  out += s.shape;
  put(out, s.step);
  put(out, static_cast<uint64_t>(s.params.size()));
  put(out, static_cast<uint64_t>(s.optimizer_state.size()));
  put(out, s.optimizer_steps);
  out.append(reinterpret_cast<const char*>(s.params.data()), 4 * s.params.size());
  out.append(reinterpret_cast<const char*>(s.optimizer_state.data()), 4 * s.optimizer_state.size());
  put(out, fnv1a64(out.data(), out.size()));
  return write_file_atomically(path, out);
}

Expected<DenseState> read_dense_state(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    return Status::not_found(fmt::format("{}: no dense layers saved there", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(fmt::format("{}: cannot open", path));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::io_error(fmt::format("{}: cannot read", path));
  auto bad = [&](const std::string& why) {
    return Status::invalid_input(fmt::format("{}: not a dense-layers file: {}", path, why));
  };
  if (bytes.size() < sizeof magic || std::memcmp(bytes.data(), magic, sizeof magic) != 0)
    return bad("it does not start with COLONYD1");
  Cursor c{bytes.data() + sizeof magic, bytes.size() - sizeof magic};
  uint32_t shape_bytes = 0;
  if (!c.get(shape_bytes)) return bad("cut short in its header");
  if (shape_bytes > dense_shape_max || shape_bytes > c.left)
    return bad(fmt::format("a shape of {} bytes (at most {}, {} left in the file)", shape_bytes,
                           dense_shape_max, c.left));
  DenseState s;
  s.shape.assign(c.p, shape_bytes);
  c.p += shape_bytes;
  c.left -= shape_bytes;
  uint64_t params = 0, state = 0;
  if (!c.get(s.step) || !c.get(params) || !c.get(state) || !c.get(s.optimizer_steps))
    return bad("cut short in its header");
  // Sizes are checked against the bytes present before anything is allocated.
  const uint64_t floats_left = c.left / 4;
  if (params > floats_left || state > floats_left - params ||
      c.left != 4 * (params + state) + sizeof(uint64_t))
    return bad(fmt::format("{} parameters and {} state floats do not fit its {} bytes", params,
                           state, bytes.size()));
  s.params.resize(params);
  s.optimizer_state.resize(state);
  std::memcpy(s.params.data(), c.p, 4 * params);
  std::memcpy(s.optimizer_state.data(), c.p + 4 * params, 4 * state);
  c.p += 4 * (params + state);
  c.left -= 4 * (params + state);
  uint64_t sum = 0;
  c.get(sum);
  if (sum != fnv1a64(bytes.data(), bytes.size() - sizeof sum))
    return bad("its checksum does not match (a damaged file)");
  return s;
}

}  // namespace colony
