// The daemons' tcp://HOST:PORT endpoints as ZeroMQ takes them: taken apart, checked before any
// socket exists, and turned into the endpoint peers use. The sockets are IPv4 (ZMQ_IPV6 is never
// set), and ZeroMQ resolves no names when it binds: a name works only to connect to.
//
// Every function is pure except check_endpoint with `bind`, which reads this machine's
// interfaces; all are safe from any thread.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"

namespace colony {

// A tcp://HOST:PORT endpoint taken apart at its last colon; none when it is not tcp://HOST:PORT
// (HOST or PORT may still be empty: tcp://:1, tcp://h:).
struct TcpEndpoint {
  std::string host, port;
};
std::optional<TcpEndpoint> parse_tcp_endpoint(const std::string& endpoint);

// The host of tcp://HOST:PORT; empty when `endpoint` does not have that shape.
std::string host_of(const std::string& endpoint);

// localhost or 127.*: only this machine reaches it.
bool is_loopback(const std::string& host);

// A tcp://HOST:PORT endpoint given to `flag`, checked: to connect to (`bind` false), HOST a name
// or an IPv4 address, not a wildcard, and PORT 1-65535; to bind, HOST an IPv4 address, the name
// of an interface here that has one, or *, and PORT also * or 0 for any free one. IPv6 is
// refused. Fails with invalid_input naming the flag and the value (and, when this machine's
// interfaces cannot be read, why).
Status check_endpoint(const char* flag, const std::string& endpoint, bool bind);

// The host given to --advertise (empty: none given): a name or an IPv4 address, not a wildcard,
// without a scheme or a port (those are --listen's). Fails with invalid_input naming it.
Status check_advertise(const std::string& host);

// The endpoint peers use: `bound` (or a --listen value) with its host replaced by `advertise`
// when given. Fails with invalid_input when `bound` has no host and port, or binds every
// interface (* or 0.0.0.0) and `advertise` is empty.
Expected<std::string> advertised_endpoint(const std::string& bound, const std::string& advertise);

}  // namespace colony
