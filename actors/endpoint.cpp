#include "actors/endpoint.h"

#include <arpa/inet.h>
#include <ifaddrs.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace colony {

namespace {

bool is_wildcard(const std::string& host) {
  return host == "*" || host == "0.0.0.0";
}

// A host to connect to or to advertise: why it cannot be one, or empty.
std::string peer_host_fault(const std::string& host) {
  if (host.find_first_of("[]:") != std::string::npos)
    return "HOST holds a colon or a bracket: IPv6 addresses are not supported";
  if (is_wildcard(host)) return fmt::format("{} is a wildcard, no address to connect to", host);
  const bool name_or_ipv4 =
      !host.empty() && std::all_of(host.begin(), host.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '.' || c == '-' || c == '_';
      });
  return name_or_ipv4 ? "" : "not a host name or an IPv4 address";
}

// Whether this machine has an interface of that name with an IPv4 address (what ZeroMQ binds to
// for an interface name); an error when the interfaces cannot be read.
Expected<bool> is_ipv4_interface(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0)
    return Status::io_error(
        fmt::format("cannot list this machine's interfaces: {}", std::strerror(errno)));
  bool found = false;
  for (const ifaddrs* i = list; i && !found; i = i->ifa_next)
    found = i->ifa_addr && i->ifa_addr->sa_family == AF_INET && name == i->ifa_name;
  freeifaddrs(list);
  return found;
}

}  // namespace

std::optional<TcpEndpoint> parse_tcp_endpoint(const std::string& endpoint) {
  constexpr size_t scheme = 6;  // tcp://
  const size_t colon = endpoint.rfind(':');
  if (endpoint.rfind("tcp://", 0) != 0 || colon < scheme) return std::nullopt;
  return TcpEndpoint{endpoint.substr(scheme, colon - scheme), endpoint.substr(colon + 1)};
}

std::string host_of(const std::string& endpoint) {
  const auto e = parse_tcp_endpoint(endpoint);
  return e ? e->host : "";
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0;
}

Status check_endpoint(const char* flag, const std::string& endpoint, bool bind) {
  const auto refused = [&](const std::string& why) {
    return Status::invalid_input(fmt::format("{} {}: {}", flag, endpoint, why));
  };
  const auto e = parse_tcp_endpoint(endpoint);
  if (!e || e->host.empty())
    return refused(bind ? "not a tcp://HOST:PORT endpoint (PORT * for any)"
                        : "not a tcp://HOST:PORT endpoint");
  const std::string& port = e->port;
  const bool any_port = bind && (port == "*" || port == "0");
  if (!any_port &&
      (port.empty() || port.size() > 5 ||
       !std::all_of(port.begin(), port.end(), [](unsigned char c) { return std::isdigit(c); }) ||
       std::stoul(port) == 0 || std::stoul(port) > 65535))
    return refused(bind ? "PORT must be 1-65535, or * for any" : "PORT must be 1-65535");
  if (!bind) {
    const std::string fault = peer_host_fault(e->host);
    return fault.empty() ? Status() : refused(fault);
  }
  if (e->host.find_first_of("[]:") != std::string::npos)
    return refused("HOST holds a colon or a bracket: IPv6 addresses are not supported");
  in_addr ip{};
  if (e->host == "*" || inet_pton(AF_INET, e->host.c_str(), &ip) == 1) return Status();
  auto interface = is_ipv4_interface(e->host);
  if (!interface) return refused(interface.status().message());
  if (!*interface)
    return refused(fmt::format(
        "a socket binds to an IPv4 address, an interface name or *, and {} is neither an "
        "address nor an interface with one here (a host name is not resolved there)",
        e->host));
  return Status();
}

Status check_advertise(const std::string& host) {
  if (host.empty()) return Status();
  // One colon, as in HOST:PORT or tcp://HOST, is a port or scheme given where none belongs.
  if (std::count(host.begin(), host.end(), ':') == 1 && host.find('[') == std::string::npos)
    return Status::invalid_input(fmt::format(
        "--advertise {}: give the host or address only (e.g. 10.0.0.2); the port is --listen's",
        host));
  const std::string fault = peer_host_fault(host);
  return fault.empty() ? Status()
                       : Status::invalid_input(fmt::format("--advertise {}: {}", host, fault));
}

Expected<std::string> advertised_endpoint(const std::string& bound, const std::string& advertise) {
  const auto e = parse_tcp_endpoint(bound);
  if (!e || e->host.empty())
    return Status::invalid_input("cannot tell the host and port of " + bound);
  if (!advertise.empty()) return fmt::format("tcp://{}:{}", advertise, e->port);
  if (is_wildcard(e->host))
    return Status::invalid_input(
        fmt::format("--listen {} binds every interface: say which address peers should use with "
                    "--advertise HOST",
                    bound));
  return bound;
}

}  // namespace colony
