// The daemons' endpoints (actors/endpoint.h): a tcp://HOST:PORT is split at its last colon, and
// the checks refuse what ZeroMQ could not use, before a socket exists.
#define BOOST_TEST_MODULE endpoint_test
#include <boost/test/unit_test.hpp>

#include <ifaddrs.h>
#include <netinet/in.h>

#include <string>

#include "actors/endpoint.h"

using namespace colony;

namespace {

// The name of an interface here with an IPv4 address (loopback's, usually); empty when none can
// be listed.
std::string an_ipv4_interface() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (const ifaddrs* i = list; i && name.empty(); i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) name = i->ifa_name;
  freeifaddrs(list);
  return name;
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_endpoint_is_split_at_its_last_colon) {
  BOOST_TEST(!parse_tcp_endpoint("tcp://"));
  BOOST_TEST(!parse_tcp_endpoint("tcp://h"));
  BOOST_TEST(!parse_tcp_endpoint("udp://h:1"));
  const auto no_port = parse_tcp_endpoint("tcp://h:");
  BOOST_REQUIRE(no_port);
  BOOST_TEST(no_port->host == "h");
  BOOST_TEST(no_port->port.empty());
  const auto no_host = parse_tcp_endpoint("tcp://:1");
  BOOST_REQUIRE(no_host);
  BOOST_TEST(no_host->host.empty());
  const auto two = parse_tcp_endpoint("tcp://a:b:1");
  BOOST_REQUIRE(two);
  BOOST_TEST(two->host == "a:b");
  BOOST_TEST(two->port == "1");
  BOOST_TEST(host_of("tcp://10.0.0.2:7101") == "10.0.0.2");
  BOOST_TEST(host_of("garbage").empty());
}

BOOST_AUTO_TEST_CASE(an_endpoint_to_connect_to_names_a_host_and_a_port) {
  for (const char* ok : {"tcp://10.0.0.1:7100", "tcp://node-1.example:1", "tcp://h_2:65535"})
    BOOST_TEST(check_endpoint("--coordinator", ok, false).ok(), ok);
  for (const char* bad : {"tcp://h:", "tcp://h:0", "tcp://h:65536", "tcp://h:1x", "tcp://:1",
                          "tcp://a:b:1", "tcp://[::1]:1", "tcp://*:1", "tcp://0.0.0.0:1",
                          "tcp://a b:1", "tcp://u@h:1", "tcp://h:*", "h:1"}) {
    const Status s = check_endpoint("--coordinator", bad, false);
    BOOST_TEST(!s.ok(), bad);
    BOOST_TEST(s.message().find(std::string("--coordinator ") + bad + ": ") == 0, s.message());
  }
}

BOOST_AUTO_TEST_CASE(an_endpoint_to_bind_names_an_address_an_interface_or_any) {
  for (const char* ok : {"tcp://127.0.0.1:*", "tcp://0.0.0.0:0", "tcp://*:7101"})
    BOOST_TEST(check_endpoint("--listen", ok, true).ok(), ok);
  for (const char* bad : {"tcp://localhost:1", "tcp://no-such-interface:1", "tcp://127.0.0.1:00",
                          "tcp://127.0.0.1", "tcp://[::]:1"})
    BOOST_TEST(!check_endpoint("--listen", bad, true).ok(), bad);
  const std::string interface = an_ipv4_interface();
  if (interface.empty()) {
    BOOST_TEST_MESSAGE("no interface with an IPv4 address listed here: its case is skipped");
    return;
  }
  BOOST_TEST(check_endpoint("--listen", "tcp://" + interface + ":*", true).ok(), interface);
}

BOOST_AUTO_TEST_CASE(an_advertised_host_is_bare_and_reachable) {
  for (const char* ok : {"", "10.0.0.2", "node-2.example"})
    BOOST_TEST(check_advertise(ok).ok(), ok);
  for (const char* bad : {"10.0.0.2:7101", "tcp://h", "fe80::1", "[::1]", "*", "0.0.0.0", "a/b"})
    BOOST_TEST(!check_advertise(bad).ok(), bad);
  BOOST_TEST(!advertised_endpoint("tcp://0.0.0.0:5", "").ok());
  BOOST_TEST(!advertised_endpoint("tcp://*:5", "").ok());
  auto named = advertised_endpoint("tcp://0.0.0.0:5", "n");
  BOOST_REQUIRE(named.ok());
  BOOST_TEST(*named == "tcp://n:5");
  auto as_bound = advertised_endpoint("tcp://10.0.0.2:5", "");
  BOOST_REQUIRE(as_bound.ok());
  BOOST_TEST(*as_bound == "tcp://10.0.0.2:5");
}
