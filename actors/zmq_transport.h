// A minimal byte-message transport over ZeroMQ, authenticated with CURVE.
//
// ZmqServer binds a ROUTER socket; each ZmqClient is a DEALER connected to it. A message is one
// or more frames of payload bytes, delivered whole or not at all; the server sees which peer
// (routing identity) sent it and replies to that identity. With CURVE, the link is encrypted
// and the server admits only clients whose public key is on its authorized list (a ZAP
// handler, see ZmqServer); without CURVE (the --insecure mode) it is plain TCP and admits
// anyone.
//
// Nothing is dropped silently on send: a message is queued in full or the call returns an
// error. Delivery is still ZeroMQ's: a queued message is lost when its connection breaks or its
// CURVE handshake is refused; protocols above must not assume otherwise.
//
// Threads: a server or client is used by one thread at a time (ZeroMQ sockets are not
// thread-safe); only ZmqServer::refused() may be called from any thread. Every libzmq error
// comes back as a Status naming the endpoint; no exception escapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "actors/curve_keys.h"
#include "common/shared_bytes.h"
#include "common/status.h"

namespace zmq {
class message_t;
}

namespace colony {

// The largest message sent or accepted: the wire format's limit (64 MiB, envelope.h). A peer
// sending more is disconnected by libzmq (ZMQ_MAXMSGSIZE).
inline constexpr size_t zmq_message_bytes_max = size_t{64} << 20;
// The longest receive wait: a bounded wait keeps every loop above us bounded.
inline constexpr int zmq_receive_timeout_ms_max = 3'600'000;
// How many refused attempts ZmqServer::refused() keeps the details of (the count goes on).
inline constexpr size_t zmq_refused_recorded_max = 64;

// A received frame's bytes, left where libzmq received them (no copy); they live as long as any
// copy of this handle.
using ReceivedBytes = SharedBytes;
// The most payload frames a message may have; a message with more is refused whole.
inline constexpr size_t zmq_payload_frames_max = 16;

// What receive() returns: a message, or timed_out with nothing in it.
struct Received {
  std::vector<uint8_t> identity;      // the sending peer's routing identity; empty at a client
  std::vector<ReceivedBytes> frames;  // the payload frames, 1..zmq_payload_frames_max, in order
  std::string peer_address;           // the sending peer's IP address, when libzmq knows it
  // The sending peer's CURVE public key in Z85, as the ZAP handler admitted it (the "User-Id"
  // of the connection); empty without CURVE. The peer cannot choose it: it is the key its
  // handshake proved.
  std::string peer_key;
  bool timed_out = false;
};

// A connection attempt the ZAP handler refused.
struct RefusedPeer {
  std::string address;     // the peer's IP address, as the ZAP request gives it
  std::string public_key;  // the client public key it offered, in Z85
};

struct RefusedPeers {
  uint64_t count = 0;               // every refusal since the server opened
  std::vector<RefusedPeer> recent;  // the latest, at most zmq_refused_recorded_max, oldest first
};

struct ZmqServerOptions {
  std::string endpoint = "tcp://127.0.0.1:*";
  // The server's own key pair; nullopt = plain TCP without authentication (--insecure).
  std::optional<CurveKeyPair> curve;
  // The Z85 public keys of the clients admitted (with curve only; at least one).
  std::vector<std::string> authorized_keys;
  std::string zap_domain = "colony";
  int send_hwm = 1000;  // messages queued per peer, each way
  int receive_hwm = 1000;
  int send_timeout_ms = 1000;  // how long send() waits on a full queue before failing
};

class ZmqServer {
 public:
  // Binds the ROUTER socket (and, with curve, starts the ZAP handler first, so no connection is
  // ever admitted unchecked). Fails with invalid_input for a malformed key, an empty
  // authorized list with curve, authorized keys without curve, a zap_domain that is empty or
  // over 254 bytes, non-positive hwm or negative send timeout, or an endpoint libzmq rejects;
  // io_error when the bind fails (address in use, ...).
  static Expected<std::unique_ptr<ZmqServer>> open(const ZmqServerOptions& options);

  // Stops the ZAP handler and closes the socket without lingering: queued outgoing messages
  // are discarded.
  ~ZmqServer();
  ZmqServer(const ZmqServer&) = delete;
  ZmqServer& operator=(const ZmqServer&) = delete;

  // The bound endpoint, with the port chosen for a "*" port.
  const std::string& last_endpoint() const;

  // Waits up to timeout_ms (0..zmq_receive_timeout_ms_max; 0 = do not wait) for a message.
  // Fails with invalid_input for a message that is not [identity, 1..zmq_payload_frames_max
  // payload frames] (the frames are consumed), io_error when libzmq fails.
  Expected<Received> receive(int timeout_ms);

  // Queues `payload` to the peer with routing identity `identity`. Fails with not_found for an
  // identity with no connection (unknown or gone: ZMQ_ROUTER_MANDATORY), io_error when the
  // peer's queue stays full for send_timeout_ms, invalid_input for an empty identity or a
  // payload over zmq_message_bytes_max.
  Status send(std::span<const uint8_t> identity, std::span<const uint8_t> payload);
  // The same, handing `payload` over to libzmq instead of copying it.
  Status send(std::span<const uint8_t> identity, std::vector<uint8_t>&& payload);
  // A message of several payload frames (1..zmq_payload_frames_max, together at most
  // zmq_message_bytes_max), sent without copying: libzmq holds `owner`, which keeps the
  // frames' bytes alive, until they are out.
  Status send(std::span<const uint8_t> identity, const std::shared_ptr<const void>& owner,
              std::span<const std::span<const uint8_t>> frames);

  // The attempts refused so far. Any thread.
  RefusedPeers refused() const;

 private:
  struct Impl;
  explicit ZmqServer(std::unique_ptr<Impl> impl);
  Status send_message(std::span<const uint8_t> identity, std::vector<zmq::message_t>&& frames);
  std::unique_ptr<Impl> impl_;
};

// A ZeroMQ context (its I/O thread) that several clients share, so that a process opening many
// links does not start threads for each. Any thread.
class ZmqContext {
 public:
  static std::shared_ptr<ZmqContext> make();
  ~ZmqContext();
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  ZmqContext();
  std::unique_ptr<Impl> impl_;
};

struct ZmqClientCurve {
  CurveKeyPair own;               // this client's key pair
  std::string server_public_key;  // Z85
};

struct ZmqClientOptions {
  std::string endpoint;  // e.g. the server's last_endpoint()
  // nullopt = plain TCP (--insecure); the server must match.
  std::optional<ZmqClientCurve> curve;
  int send_hwm = 1000;
  int receive_hwm = 1000;
  int send_timeout_ms = 1000;
  // How long closing waits for queued messages to go out (0: discard them at once). With a
  // shared context, closing returns at once and the context's thread does the waiting.
  int linger_ms = 0;
  // The context to open the socket in (it must outlive the client); null: one of its own.
  std::shared_ptr<ZmqContext> context = nullptr;
};

class ZmqClient {
 public:
  // Connects the DEALER socket. The connection itself (and the CURVE handshake) happens in the
  // background, so a wrong address or a refused key does not fail here: messages sent stay
  // queued, or are lost when the handshake is refused. Fails with invalid_input for a malformed
  // key, non-positive hwm, negative send timeout or an endpoint libzmq rejects.
  static Expected<std::unique_ptr<ZmqClient>> open(const ZmqClientOptions& options);

  ~ZmqClient();  // closes, waiting up to linger_ms for queued messages to go out
  ZmqClient(const ZmqClient&) = delete;
  ZmqClient& operator=(const ZmqClient&) = delete;

  const std::string& endpoint() const;

  // Queues `payload` for the server. Fails with io_error when the queue stays full for
  // send_timeout_ms (at once when !wait), invalid_input for a payload over zmq_message_bytes_max.
  // With no connection made yet (the server unreachable, or the handshake refused), there is
  // no queue: a send waits like a full one.
  Status send(std::span<const uint8_t> payload, bool wait = true);
  // The same, handing `payload` over to libzmq instead of copying it.
  Status send(std::vector<uint8_t>&& payload, bool wait = true);
  // Several payload frames without copying, as ZmqServer::send.
  Status send(const std::shared_ptr<const void>& owner,
              std::span<const std::span<const uint8_t>> frames, bool wait = true);

  // As ZmqServer::receive; the identity of what it returns is empty.
  Expected<Received> receive(int timeout_ms);

 private:
  struct Impl;
  explicit ZmqClient(std::unique_ptr<Impl> impl);
  Status send_message(std::vector<zmq::message_t>&& frames, bool wait);
  std::unique_ptr<Impl> impl_;
};

}  // namespace colony
