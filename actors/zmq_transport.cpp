#include "actors/zmq_transport.h"

// libzmq 4.3.4 declares ZMQ_ZAP_ENFORCE_DOMAIN only under ZMQ_BUILD_DRAFT_API, yet the library
// accepts the option (it was made stable in 4.3.0; the header lags). Defining it here, and not
// the whole draft API, makes cppzmq declare zmq::sockopt::zap_enforce_domain without pulling in
// draft functions that Debian's libzmq does not export.
#include <zmq.h>
#ifndef ZMQ_ZAP_ENFORCE_DOMAIN
#define ZMQ_ZAP_ENFORCE_DOMAIN 93
#endif
#include <zmq.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

namespace colony {

namespace {

// The endpoint libzmq sends ZAP requests to, in the socket's own context (RFC 27).
constexpr const char* zap_endpoint = "inproc://zeromq.zap.01";
// A ZAP request is 6 frames plus the mechanism's credentials (one for CURVE); more is not one.
constexpr size_t zap_request_frames_max = 16;
constexpr size_t zap_domain_bytes_max = 254;

std::string to_hex(std::span<const uint8_t> bytes) {
  std::string out;
  for (uint8_t b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

std::string z85_of(std::span<const uint8_t> key) {
  COLONY_ASSERT(key.size() == curve_key_bytes, "key of {} bytes", key.size());
  std::array<char, curve_key_z85_chars + 1> text{};
  COLONY_ASSERT(zmq_z85_encode(text.data(), key.data(), key.size()) != nullptr);
  return std::string(text.data());
}

// Turns a libzmq error into ours. `where` names the endpoint and the operation.
Status zmq_status(const std::string& where, const zmq::error_t& e) {
  const std::string msg = fmt::format("{}: {}", where, e.what());
  switch (e.num()) {
    case EINVAL:
    case EPROTONOSUPPORT:
    case ENOCOMPATPROTO:
      return Status::invalid_input(msg);
    case EHOSTUNREACH:
      return Status::not_found(msg);
    default:
      return Status::io_error(msg);
  }
}

Status check_common_options(const std::string& where, int send_hwm, int receive_hwm,
                            int send_timeout_ms) {
  if (send_hwm <= 0 || receive_hwm <= 0)
    return Status::invalid_input(
        fmt::format("{}: high-water marks must be positive, got send {} "
                    "receive {}",
                    where, send_hwm, receive_hwm));
  if (send_timeout_ms < 0)
    return Status::invalid_input(
        fmt::format("{}: send timeout must be >= 0 ms, got {}", where, send_timeout_ms));
  return Status();
}

Status check_key(const std::string& where, const std::string& what, const std::string& z85) {
  if (is_curve_key_z85(z85)) return Status();
  return Status::invalid_input(
      fmt::format("{}: {} is not a {}-character Z85 CURVE key", where, what, curve_key_z85_chars));
}

void set_common_options(zmq::socket_t& s, int send_hwm, int receive_hwm, int send_timeout_ms) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, send_hwm);
  s.set(zmq::sockopt::rcvhwm, receive_hwm);
  s.set(zmq::sockopt::sndtimeo, send_timeout_ms);
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(zmq_message_bytes_max));
}

// Waits up to timeout_ms for `s` to be readable, then reads one whole message: [identity,
// payload frames...] when `with_identity` (ROUTER), else [payload frames...] (DEALER).
Expected<Received> receive_message(zmq::socket_t& s, const std::string& where, int timeout_ms,
                                   bool with_identity) {
  COLONY_ASSERT(timeout_ms >= 0 && timeout_ms <= zmq_receive_timeout_ms_max, "timeout_ms {}",
                timeout_ms);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  try {
    for (;;) {
      const auto left = std::max(std::chrono::milliseconds(0),
                                 std::chrono::duration_cast<std::chrono::milliseconds>(
                                     deadline - std::chrono::steady_clock::now()));
      zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
      int ready = 0;
      try {
        ready = zmq::poll(&item, 1, left);
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
        continue;  // a signal: wait out the rest
      }
      if (ready == 0) {
        if (left.count() > 0) continue;  // poll may wake early; the deadline decides
        Received r;
        r.timed_out = true;
        return r;
      }
      // A message is delivered whole, so once the first frame is here the rest are too.
      std::vector<zmq::message_t> frames;
      const size_t most = (with_identity ? 1 : 0) + zmq_payload_frames_max;
      size_t count = 0;
      for (bool more = true; more; ++count) {
        zmq::message_t frame;
        if (!s.recv(frame, zmq::recv_flags::dontwait)) {
          if (count == 0) break;  // another reader? not ours to share; treat as spurious
          return Status::internal(fmt::format("{}: a message ended early", where));
        }
        more = frame.more();
        if (frames.size() < most) frames.push_back(std::move(frame));
      }
      if (count == 0) continue;
      const size_t least = with_identity ? 2 : 1;
      if (count < least || count > most)
        return Status::invalid_input(fmt::format(
            "{}: received a message of {} frames, expected {} to {}", where, count, least, most));
      Received r;
      size_t first = 0;
      if (with_identity) {
        const auto* id = frames[0].data<uint8_t>();
        r.identity.assign(id, id + frames[0].size());
        first = 1;
      }
      // The sender's address, from libzmq's metadata (absent on inproc and older libzmq).
      if (const char* address = zmq_msg_gets(frames[first].handle(), "Peer-Address"))
        r.peer_address = address;
      if (const char* key = zmq_msg_gets(frames[first].handle(), "User-Id")) r.peer_key = key;
      for (size_t i = first; i < frames.size(); ++i) {
        auto owner = std::make_shared<zmq::message_t>(std::move(frames[i]));
        const zmq::message_t& body = *owner;
        r.frames.emplace_back(owner, body.data<uint8_t>(), body.size());
      }
      return r;
    }
  } catch (const zmq::error_t& e) {
    return zmq_status(where + ": receive", e);
  }
}

// A message that takes over `bytes` without copying them; libzmq frees them (from its I/O
// thread) once sent.
zmq::message_t adopt(std::vector<uint8_t>&& bytes) {
  auto* owned = new std::vector<uint8_t>(std::move(bytes));
  return zmq::message_t(
      owned->data(), owned->size(),
      [](void*, void* hint) { delete static_cast<std::vector<uint8_t>*>(hint); }, owned);
}

// Frames that refer to bytes `owner` keeps alive; each frame holds a reference to it until
// libzmq is done with the frame. Fails with invalid_input for no frames or too many (the size
// is send_message's to check).
Expected<std::vector<zmq::message_t>> share(const std::string& where,
                                            const std::shared_ptr<const void>& owner,
                                            std::span<const std::span<const uint8_t>> frames) {
  if (frames.empty() || frames.size() > zmq_payload_frames_max)
    return Status::invalid_input(fmt::format("{}: a message of {} payload frames, expected 1 to {}",
                                             where, frames.size(), zmq_payload_frames_max));
  std::vector<zmq::message_t> out;
  out.reserve(frames.size());
  for (const auto& f : frames) {
    auto* ref = new std::shared_ptr<const void>(owner);
    out.emplace_back(
        const_cast<uint8_t*>(f.data()), f.size(),
        [](void*, void* hint) { delete static_cast<std::shared_ptr<const void>*>(hint); }, ref);
  }
  return out;
}

std::vector<zmq::message_t> one_frame(zmq::message_t&& m) {
  std::vector<zmq::message_t> v;
  v.push_back(std::move(m));
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ZmqServer

struct ZmqServer::Impl {
  // Declared first so it is destroyed last, after every socket.
  zmq::context_t context{1};
  zmq::socket_t router;
  zmq::socket_t zap;  // used only by zap_thread once it runs
  std::thread zap_thread;
  std::string where;      // "zmq server <bound endpoint>", for messages
  std::string zap_where;  // the same before the bind; set before zap_thread starts
  std::string endpoint;
  std::string zap_domain;
  std::set<std::string> authorized;  // 32-byte binary keys

  mutable std::mutex mu;
  RefusedPeers refused;     // guarded by mu
  std::string zap_failure;  // guarded by mu; why the ZAP handler stopped, if it failed
  std::atomic<bool> zap_failed{false};

  ~Impl() {
    // The router first, so no new handshake needs the handler; then shutdown() makes the
    // handler's blocking recv fail with ETERM, and it closes its socket and returns.
    router.close();
    if (zap_thread.joinable()) {
      context.shutdown();
      zap_thread.join();
    }
  }

  void record_refusal(std::string address, std::string key_z85) {
    std::lock_guard lock(mu);
    ++refused.count;
    if (refused.recent.size() == zmq_refused_recorded_max)
      refused.recent.erase(refused.recent.begin());
    refused.recent.push_back(RefusedPeer{std::move(address), std::move(key_z85)});
  }

  // One ZAP request (RFC 27): version, request id, domain, address, identity, mechanism,
  // credentials. Returns the reply's status code and user id.
  std::pair<const char*, std::string> decide(const std::vector<zmq::message_t>& f) {
    if (f.size() < 6) return {"400", ""};
    const std::string address = f[3].to_string();
    const bool curve =
        f[5].to_string() == "CURVE" && f.size() == 7 && f[6].size() == curve_key_bytes;
    const std::string key_z85 = curve ? z85_of({f[6].data<uint8_t>(), f[6].size()}) : "";
    const bool admitted = f[0].to_string() == "1.0" && f[2].to_string() == zap_domain && curve &&
                          authorized.count(f[6].to_string()) == 1;
    if (admitted) return {"200", key_z85};
    record_refusal(address, key_z85);
    return {"400", ""};
  }

  void run_zap_handler() {
    try {
      for (;;) {
        std::vector<zmq::message_t> frames;
        bool more = true;
        while (more) {
          zmq::message_t frame;
          try {
            (void)zap.recv(frame, zmq::recv_flags::none);
          } catch (const zmq::error_t& e) {
            if (e.num() == EINTR && frames.empty()) continue;
            throw;
          }
          more = frame.more();
          if (frames.size() < zap_request_frames_max) frames.push_back(std::move(frame));
        }
        const auto [code, user_id] = decide(frames);
        const std::string request_id = frames.size() > 1 ? frames[1].to_string() : "";
        zap.send(zmq::buffer(std::string_view("1.0")), zmq::send_flags::sndmore);
        zap.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
        zap.send(zmq::buffer(std::string_view(code)), zmq::send_flags::sndmore);
        zap.send(zmq::buffer(std::string_view(code[0] == '2' ? "OK" : "key not authorized")),
                 zmq::send_flags::sndmore);
        zap.send(zmq::buffer(user_id), zmq::send_flags::sndmore);
        zap.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::none);  // no metadata
      }
    } catch (const zmq::error_t& e) {
      if (e.num() != ETERM) {
        // Handshakes now wait for a reply that never comes: the server fails closed, and
        // receive() reports why.
        std::lock_guard lock(mu);
        zap_failure = fmt::format("{}: ZAP handler stopped: {}", zap_where, e.what());
        zap_failed = true;
      }
    }
    zap.close();
  }
};

ZmqServer::ZmqServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ZmqServer::~ZmqServer() = default;

Expected<std::unique_ptr<ZmqServer>> ZmqServer::open(const ZmqServerOptions& options) {
  const std::string where = fmt::format("zmq server {}", options.endpoint);
  if (Status s = check_common_options(where, options.send_hwm, options.receive_hwm,
                                      options.send_timeout_ms);
      !s.ok())
    return s;
  auto impl = std::make_unique<Impl>();
  impl->where = where;
  impl->zap_where = where;
  impl->endpoint = options.endpoint;
  impl->zap_domain = options.zap_domain;
  if (options.curve) {
    if (Status s = check_key(where, "the server secret key", options.curve->secret_z85); !s.ok())
      return s;
    if (options.authorized_keys.empty())
      return Status::invalid_input(
          fmt::format("{}: CURVE without authorized keys would refuse every client", where));
    for (size_t i = 0; i < options.authorized_keys.size(); ++i) {
      const std::string& key = options.authorized_keys[i];
      if (Status s = check_key(where, fmt::format("authorized key {}", i), key); !s.ok()) return s;
      std::array<uint8_t, curve_key_bytes> bytes{};
      COLONY_ASSERT(zmq_z85_decode(bytes.data(), key.c_str()) != nullptr);
      impl->authorized.insert(std::string(bytes.begin(), bytes.end()));
    }
    if (options.zap_domain.empty() || options.zap_domain.size() > zap_domain_bytes_max)
      return Status::invalid_input(fmt::format("{}: the ZAP domain must be 1..{} bytes, got {}",
                                               where, zap_domain_bytes_max,
                                               options.zap_domain.size()));
  } else if (!options.authorized_keys.empty()) {
    return Status::invalid_input(
        fmt::format("{}: authorized keys given without CURVE; they would not be checked", where));
  }

  try {
    if (options.curve) {
      // Bound before the router exists, so no handshake can find the handler missing.
      impl->zap = zmq::socket_t(impl->context, zmq::socket_type::rep);
      impl->zap.set(zmq::sockopt::linger, 0);
      try {
        impl->zap.bind(zap_endpoint);
      } catch (const zmq::error_t& e) {
        return zmq_status(fmt::format("{}: bind the ZAP handler on {}", where, zap_endpoint), e);
      }
      impl->zap_thread = std::thread([raw = impl.get()] { raw->run_zap_handler(); });
    }
    impl->router = zmq::socket_t(impl->context, zmq::socket_type::router);
    zmq::socket_t& r = impl->router;
    set_common_options(r, options.send_hwm, options.receive_hwm, options.send_timeout_ms);
    r.set(zmq::sockopt::router_mandatory, true);
    if (options.curve) {
      r.set(zmq::sockopt::curve_server, true);
      r.set(zmq::sockopt::curve_secretkey, options.curve->secret_z85);
      r.set(zmq::sockopt::zap_domain, options.zap_domain);
      // Refuse, rather than admit, a handshake when no ZAP handler answers.
      r.set(zmq::sockopt::zap_enforce_domain, true);
    }
    try {
      r.bind(options.endpoint);
    } catch (const zmq::error_t& e) {
      return zmq_status(where + ": bind", e);
    }
    impl->endpoint = r.get(zmq::sockopt::last_endpoint);
    impl->where = fmt::format("zmq server {}", impl->endpoint);
  } catch (const zmq::error_t& e) {
    return zmq_status(where + ": set up the socket", e);
  }
  return std::unique_ptr<ZmqServer>(new ZmqServer(std::move(impl)));
}

const std::string& ZmqServer::last_endpoint() const {
  return impl_->endpoint;
}

Expected<Received> ZmqServer::receive(int timeout_ms) {
  if (impl_->zap_failed) {
    std::lock_guard lock(impl_->mu);
    return Status::internal(impl_->zap_failure);
  }
  return receive_message(impl_->router, impl_->where, timeout_ms, /*with_identity=*/true);
}

Status ZmqServer::send(std::span<const uint8_t> identity, std::span<const uint8_t> payload) {
  return send_message(identity, one_frame(zmq::message_t(payload.data(), payload.size())));
}

Status ZmqServer::send(std::span<const uint8_t> identity, std::vector<uint8_t>&& payload) {
  return send_message(identity, one_frame(adopt(std::move(payload))));
}

Status ZmqServer::send(std::span<const uint8_t> identity, const std::shared_ptr<const void>& owner,
                       std::span<const std::span<const uint8_t>> frames) {
  auto shared = share(impl_->where, owner, frames);
  if (!shared) return shared.status();
  return send_message(identity, std::move(*shared));
}

Status ZmqServer::send_message(std::span<const uint8_t> identity,
                               std::vector<zmq::message_t>&& frames) {
  const std::string& where = impl_->where;
  if (identity.empty())
    return Status::invalid_input(fmt::format("{}: send to an empty peer identity", where));
  size_t bytes = 0;
  for (const auto& f : frames) bytes += f.size();
  if (bytes > zmq_message_bytes_max)
    return Status::invalid_input(fmt::format("{}: a payload of {} bytes exceeds the {} byte limit",
                                             where, bytes, zmq_message_bytes_max));
  const std::string peer = fmt::format("{}: send to peer {}", where, to_hex(identity));
  try {
    // The router decides on the identity frame: unroutable (EHOSTUNREACH) or full (EAGAIN after
    // the send timeout). Once it is accepted the payload frames join it in the same queue.
    for (;;) {
      try {
        if (!impl_->router.send(zmq::buffer(identity.data(), identity.size()),
                                zmq::send_flags::sndmore))
          return Status::io_error(fmt::format("{}: the peer's queue stayed full", peer));
        break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
    }
    for (size_t i = 0; i < frames.size(); ++i)
      if (!impl_->router.send(
              frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none))
        return Status::io_error(fmt::format("{}: a payload frame was not queued", peer));
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH)
      return Status::not_found(fmt::format("{}: no such peer connected", peer));
    return zmq_status(peer, e);
  }
  return Status();
}

RefusedPeers ZmqServer::refused() const {
  std::lock_guard lock(impl_->mu);
  return impl_->refused;
}

// ---------------------------------------------------------------------------------------------
// ZmqClient

struct ZmqContext::Impl {
  zmq::context_t context{1};
};

ZmqContext::ZmqContext() : impl_(std::make_unique<Impl>()) {}
ZmqContext::~ZmqContext() = default;
std::shared_ptr<ZmqContext> ZmqContext::make() {
  return std::shared_ptr<ZmqContext>(new ZmqContext());
}

struct ZmqClient::Impl {
  // Declared first so it is destroyed last, after the socket: the shared context, or our own.
  std::shared_ptr<ZmqContext> context;
  zmq::socket_t dealer;
  std::string endpoint;
  std::string where;
};

ZmqClient::ZmqClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ZmqClient::~ZmqClient() = default;

Expected<std::unique_ptr<ZmqClient>> ZmqClient::open(const ZmqClientOptions& options) {
  const std::string where = fmt::format("zmq client of {}", options.endpoint);
  if (Status s = check_common_options(where, options.send_hwm, options.receive_hwm,
                                      options.send_timeout_ms);
      !s.ok())
    return s;
  if (options.curve) {
    if (Status s = check_key(where, "the client public key", options.curve->own.public_z85);
        !s.ok())
      return s;
    if (Status s = check_key(where, "the client secret key", options.curve->own.secret_z85);
        !s.ok())
      return s;
    if (Status s = check_key(where, "the server public key", options.curve->server_public_key);
        !s.ok())
      return s;
  }
  auto impl = std::make_unique<Impl>();
  impl->endpoint = options.endpoint;
  impl->where = where;
  impl->context = options.context ? options.context : ZmqContext::make();
  try {
    impl->dealer = zmq::socket_t(impl->context->impl().context, zmq::socket_type::dealer);
    zmq::socket_t& d = impl->dealer;
    set_common_options(d, options.send_hwm, options.receive_hwm, options.send_timeout_ms);
    d.set(zmq::sockopt::linger, std::max(0, options.linger_ms));
    if (options.curve) {
      d.set(zmq::sockopt::curve_serverkey, options.curve->server_public_key);
      d.set(zmq::sockopt::curve_publickey, options.curve->own.public_z85);
      d.set(zmq::sockopt::curve_secretkey, options.curve->own.secret_z85);
    }
    try {
      d.connect(options.endpoint);
    } catch (const zmq::error_t& e) {
      return zmq_status(where + ": connect", e);
    }
  } catch (const zmq::error_t& e) {
    return zmq_status(where + ": set up the socket", e);
  }
  return std::unique_ptr<ZmqClient>(new ZmqClient(std::move(impl)));
}

const std::string& ZmqClient::endpoint() const {
  return impl_->endpoint;
}

Status ZmqClient::send(std::span<const uint8_t> payload, bool wait) {
  return send_message(one_frame(zmq::message_t(payload.data(), payload.size())), wait);
}

Status ZmqClient::send(std::vector<uint8_t>&& payload, bool wait) {
  return send_message(one_frame(adopt(std::move(payload))), wait);
}

Status ZmqClient::send(const std::shared_ptr<const void>& owner,
                       std::span<const std::span<const uint8_t>> frames, bool wait) {
  auto shared = share(impl_->where, owner, frames);
  if (!shared) return shared.status();
  return send_message(std::move(*shared), wait);
}

Status ZmqClient::send_message(std::vector<zmq::message_t>&& frames, bool wait) {
  const std::string& where = impl_->where;
  size_t bytes = 0;
  for (const auto& f : frames) bytes += f.size();
  if (bytes > zmq_message_bytes_max)
    return Status::invalid_input(fmt::format("{}: a payload of {} bytes exceeds the {} byte limit",
                                             where, bytes, zmq_message_bytes_max));
  try {
    // The first frame decides (a full queue, no connection yet); once it is accepted the rest of
    // the message joins it in the same queue.
    for (;;) {
      try {
        if (!impl_->dealer.send(
                frames[0],
                (wait ? zmq::send_flags::none : zmq::send_flags::dontwait) |
                    (frames.size() > 1 ? zmq::send_flags::sndmore : zmq::send_flags::none)))
          return Status::io_error(where +
                                  (wait ? ": send: the queue stayed full"
                                        : ": send: the queue is full (or no connection yet)"));
        break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
    }
    for (size_t i = 1; i < frames.size(); ++i)
      if (!impl_->dealer.send(
              frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none))
        return Status::io_error(where + ": send: a payload frame was not queued");
    return Status();
  } catch (const zmq::error_t& e) {
    return zmq_status(where + ": send", e);
  }
}

Expected<Received> ZmqClient::receive(int timeout_ms) {
  return receive_message(impl_->dealer, impl_->where, timeout_ms, /*with_identity=*/false);
}

}  // namespace colony
